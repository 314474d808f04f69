"""The output-quality gate`s agreement measure (node.quality), pure."""

from __future__ import annotations

import pytest

from spec_sweep.node.quality import agreement


def test_agreement_is_the_mean_common_prefix_over_the_first_n_tokens() -> None:
    ref = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]]
    assert agreement(ref, ref, tokens=4) == (1.0, None)
    got = [[1, 2, 3, 4], [5, 0, 7, 8], [9, 9, 9, 9, 1]]
    # prompt 1 diverges at its 2nd token: 1/4; later equal tokens do not count back.
    assert agreement(ref, got, tokens=4) == (pytest.approx((1 + 0.25 + 1) / 3), 1)
    assert agreement(ref, [[1, 2], [5, 6, 7, 8], [9, 9, 9, 9]], tokens=4)[0] == pytest.approx(
        (0.5 + 1 + 1) / 3
    )
    with pytest.raises(ValueError, match="reference outputs"):
        agreement(ref, ref[:2], tokens=4)
