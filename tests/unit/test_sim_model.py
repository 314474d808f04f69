"""Unit tests of the simulated node's pure parts: profiles, memory/boot planning, the performance
model (calibration against the reference figures, determinism, acceptance) and argument
parsing."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from spec_sweep.sim import texts
from spec_sweep.sim.cli import adapt_args, parse_command_line
from spec_sweep.sim.model import (
    NodeConfig,
    NodePlan,
    SpecSettings,
    capture_batch_sizes,
    plan_node,
)
from spec_sweep.sim.perf import AcceptSampler, PerfModel
from spec_sweep.sim.profiles import Profile, ProfileError, builtin_profiles, load_profile

PCIE = "rtx-pro-6000-pcie-x8"
H200 = "h200-nvlink-x8"


@pytest.fixture(scope="module")
def pcie() -> Profile:
    return load_profile(PCIE)


@pytest.fixture(scope="module")
def h200() -> Profile:
    return load_profile(H200)


def _plan(profile: Profile, **kw: object) -> NodePlan:
    config = NodeConfig(flavor=kw.pop("flavor", "new"), model_path="m", tp_size=8, **kw)  # type: ignore[arg-type]
    return plan_node(profile, config)


def _perf(profile: Profile, **kw: object) -> PerfModel:
    plan = _plan(profile, **kw)
    assert plan.failure is None, plan.failure
    return PerfModel(profile, plan)


def _eagle(steps: int = 3, topk: int = 1, tokens: int = 4) -> SpecSettings:
    return SpecSettings("EAGLE3", steps, topk, tokens, "draft")


def test_builtin_profiles_load() -> None:
    assert {PCIE, H200} <= set(builtin_profiles())
    for name in builtin_profiles():
        profile = load_profile(name)
        assert profile.reference["figures"], name


def test_profile_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="unknown simulator profile"):
        load_profile("no-such-node")
    text = (Path(__file__).parents[2] / "spec_sweep/sim/profiles" / f"{PCIE}.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("num_gpus: 8", "num_gpus: eight"))
    with pytest.raises(ProfileError, match=r"hardware\.num_gpus: expected an integer"):
        load_profile(str(bad))


@pytest.mark.parametrize(("max_bs", "target"), [(512, 82.0), (128, 89.5)])
def test_pcie_baseline_matches_writeup(pcie: Profile, max_bs: int, target: float) -> None:
    speed = _perf(pcie, cuda_graph_max_bs=max_bs).expected_decode_tok_s(1)
    assert speed == pytest.approx(target, rel=0.005)


def test_pcie_eagle3_writeup_setting_and_verify_cost(pcie: Profile) -> None:
    perf = _perf(pcie, cuda_graph_max_bs=128, mem_fraction_static=0.88, spec=_eagle())
    assert perf.expected_decode_tok_s(1) == pytest.approx(54.1, rel=0.01)
    assert perf.verify_ms(1) == pytest.approx(30.0, rel=0.03)
    assert pcie.perf.ar_count == 122


def test_pcie_eagle3_loses_everywhere(pcie: Profile) -> None:
    best_baseline = _perf(pcie, cuda_graph_max_bs=128).expected_decode_tok_s(1)
    speeds = []
    for steps, topk, tokens in itertools.product(range(1, 8), (1, 2, 4, 8), (2, 4, 8, 16)):
        plan = _plan(pcie, cuda_graph_max_bs=128, spec=_eagle(steps, topk, tokens))
        if plan.failure is None:
            speeds.append(PerfModel(pcie, plan).expected_decode_tok_s(1))
    assert len(speeds) > 40
    assert 45 < max(speeds) < 60 < 0.7 * best_baseline


def test_pcie_best_baseline_region_is_max_bs_128(pcie: Profile) -> None:
    by_bs = {
        bs: _perf(pcie, cuda_graph_max_bs=bs).expected_decode_tok_s(1)
        for bs in (16, 64, 128, 256, 512)
    }
    assert max(by_bs.values()) == pytest.approx(89.5, rel=0.005)
    assert by_bs[512] < by_bs[256] < by_bs[128]


def test_h200_eagle3_wins_at_low_concurrency(h200: Profile) -> None:
    base = _perf(h200)
    eagle = _perf(h200, spec=_eagle())
    assert base.expected_decode_tok_s(1) == pytest.approx(30.29, rel=0.005)
    assert eagle.expected_decode_tok_s(1) / base.expected_decode_tok_s(1) == pytest.approx(
        1.8, rel=0.02
    )
    ratio32 = eagle.expected_decode_tok_s(32) / base.expected_decode_tok_s(32)
    assert ratio32 == pytest.approx(1.5, rel=0.02)
    pcie_eagle = _perf(load_profile(PCIE), spec=_eagle())
    assert 10 * eagle.allreduce_ms("verify", 4) < pcie_eagle.allreduce_ms("verify", 4)


def test_memory_with_and_without_ep(pcie: Profile) -> None:
    assert _plan(pcie).post_load_avail_gib == pytest.approx(21.7, abs=0.01)
    assert _plan(pcie, ep_size=8).post_load_avail_gib == pytest.approx(16.3, abs=0.01)


def test_concurrency_and_graph_coverage_cost_time(pcie: Profile) -> None:
    perf = _perf(pcie, cuda_graph_max_bs=16)
    assert perf.decode_step_ms(8) > perf.decode_step_ms(1)
    assert perf.uses_graph(16)
    assert not perf.uses_graph(17)
    assert perf.decode_step_ms(17) > 1.3 * perf.decode_step_ms(16)


def test_default_resolution_follows_sglang_heuristics(pcie: Profile) -> None:
    plan = _plan(pcie)
    assert plan.graph_max_bs == 512
    assert plan.chunked_prefill_size == 8192
    assert plan.mem_fraction_static == pytest.approx(0.848, abs=0.001)
    spec = _plan(pcie, spec=_eagle())
    assert spec.max_running_requests == 48
    assert spec.graph_max_bs == 48
    assert texts.SPEC_MAX_RUNNING_RESET in spec.main_warnings
    adjusted = _plan(pcie, spec=_eagle(3, 1, 8))
    assert adjusted.spec is not None
    assert adjusted.spec.draft_tokens == 4
    assert texts.SPEC_DRAFT_TOKENS_ADJUSTED in adjusted.main_warnings


def test_capture_batch_sizes_match_sglang() -> None:
    sizes = capture_batch_sizes(512, speculative=False)
    assert sizes[:6] == [1, 2, 4, 8, 12, 16]
    assert sizes[-1] == 512
    assert len(sizes) == 52
    assert capture_batch_sizes(48, speculative=True)[:9] == [1, 2, 3, 4, 5, 6, 7, 8, 10]
    assert capture_batch_sizes(100, speculative=False)[-1] == 100


@pytest.mark.parametrize(
    ("kwargs", "stage", "needle"),
    [
        ({"mem_fraction_static": 0.70}, "memory_pool", "Loaded weights leave no GPU memory"),
        ({"mem_fraction_static": 0.70, "flavor": "old"}, "memory_pool", texts.NOT_ENOUGH_MEMORY),
        ({"mem_fraction_static": 0.96}, "capture", "Capture cuda graph failed: CUDA out of memory"),
        ({"mem_fraction_static": 0.80, "ep_size": 8}, "memory_pool", "Loaded weights leave no"),
        ({"tp_size": 4}, "load", "torch.OutOfMemoryError: CUDA out of memory"),
        ({"tp_size": 16}, "distributed", "CUDA error: invalid device ordinal"),
        ({"fusion_backend": "auto"}, "workspace", texts.FUSION_REQUIRES_SM90),
        ({"nccl_algo": "NVLS"}, "distributed", "NCCL error: invalid usage"),
        ({"spec": SpecSettings("EAGLE3", 2, 2, 8, "d")}, "draft_capture", "selected index k"),
        ({"spec": SpecSettings("EAGLE3", 1, 2, 4, "d")}, "warmup", "selected index k"),
        ({"spec": SpecSettings("EAGLE3", 0, 2, 2, "d")}, "warmup", texts.CAT_EMPTY),
        (
            {"spec": SpecSettings("EAGLE3", 5, 2, 4, "d"), "sglang_version": "0.5.17"},
            "warmup",
            "The expanded size of the tensor (4) must match the existing size (6)",
        ),
        ({"spec": SpecSettings("EAGLE3", None, 2, None, "d")}, "args", "AssertionError"),
        ({"spec": SpecSettings("MEDUSA", 3, 1, 4, "d")}, "args", "Unknown speculative algorithm"),
        ({"moe_a2a_backend": "flashinfer", "ep_size": 8}, "args", texts.A2A_TOPOLOGY_NEW),
        (
            {
                "moe_a2a_backend": "flashinfer",
                "ep_size": 8,
                "enable_dp_attention": True,
                "dp_size": 8,
                "moe_runner_backend": "flashinfer_cutlass",
            },
            "workspace",
            "torch.OutOfMemoryError",
        ),
        ({"torch_symm_mem": True, "flavor": "old"}, "distributed", "KeyError: 12"),
        ({"moe_a2a_backend": "flashinfer", "flavor": "old"}, "args", texts.A2A_TOPOLOGY_OLD),
    ],
)
def test_configurations_fail_like_sglang(
    pcie: Profile, kwargs: dict[str, object], stage: str, needle: str
) -> None:
    kwargs = dict(kwargs)
    if "tp_size" in kwargs:
        config = NodeConfig(flavor="new", model_path="m", **kwargs)  # type: ignore[arg-type]
        plan = plan_node(pcie, config)
    else:
        plan = _plan(pcie, **kwargs)
    assert plan.failure is not None
    assert plan.failure.stage == stage
    assert needle in plan.failure.text
    assert plan.failure.text.startswith("Traceback (most recent call last):")


def test_unsupported_features_only_warn_where_sglang_warns(pcie: Profile) -> None:
    symm = _plan(pcie, torch_symm_mem=True)
    assert symm.failure is None
    assert symm.allreduce_impl == "nccl"
    assert texts.symm_mem_unsupported_line(12) in symm.rank_warnings
    assert any("PCIe-only GPUs" in w for w in _plan(pcie).rank_warnings)
    old_fusion = _plan(pcie, fusion_backend="auto", flavor="old")
    assert old_fusion.failure is None
    assert any(texts.NO_SUPPORTED_ARCH_9_10 in w for w in old_fusion.rank_warnings)
    tree = _perf(pcie, nccl_algo="Tree").expected_decode_tok_s(1)
    ring = _perf(pcie).expected_decode_tok_s(1)
    assert tree <= ring


def test_h200_fast_allreduce_paths_are_used(h200: Profile) -> None:
    assert _plan(h200).allreduce_impl == "custom"
    assert _plan(h200, disable_custom_all_reduce=True).allreduce_impl == "nccl"
    assert _plan(h200, torch_symm_mem=True).allreduce_impl == "torch_symm_mem"
    fused = _perf(h200, fusion_backend="auto")
    assert fused.plan.allreduce_impl == "flashinfer_fusion"
    assert fused.expected_decode_tok_s(1) > _perf(h200).expected_decode_tok_s(1)


def test_model_is_deterministic_given_seed(pcie: Profile) -> None:
    a = _perf(pcie, seed=7, spec=_eagle())
    b = _perf(pcie, seed=7, spec=_eagle())
    c = _perf(pcie, seed=8, spec=_eagle())
    assert [a.noisy(10.0) for _ in range(5)] == [b.noisy(10.0) for _ in range(5)]
    draws_a = [a.sampler(3, natural=True).next(99) for _ in range(1)]
    draws_b = [b.sampler(3, natural=True).next(99) for _ in range(1)]
    assert draws_a == draws_b
    assert a.boot_factor != c.boot_factor
    assert abs(a.boot_factor - 1.0) < 0.03


def test_accept_sampler_converges_and_random_tokens_accept_less(pcie: Profile) -> None:
    perf = _perf(pcie, spec=_eagle(4, 1, 5))
    expected = perf.expected_accept_length(natural=True)
    sampler = perf.sampler(1, natural=True)
    draws = [sampler.next(100)[0] for _ in range(300)]
    assert sum(draws) / len(draws) == pytest.approx(expected, rel=0.02)
    assert max(draws) <= 5
    assert min(draws) >= 1
    assert perf.expected_accept_length(natural=False) < 1.15 < expected


def test_accept_sampler_respects_the_token_limit() -> None:
    sampler = AcceptSampler([0.99, 0.99, 0.99], seed=1)
    assert all(sampler.next(2)[0] <= 2 for _ in range(50))


def test_adapt_args_and_parse_command_line() -> None:
    from spec_sweep.manifest import load_manifest

    new = load_manifest("0.5.23")
    assert adapt_args(["--cuda-graph-max-bs", "128"], new) == ["--cuda-graph-max-bs-decode", "128"]
    options, config = parse_command_line(
        [
            "--model-path",
            "m",
            "--tp-size",
            "8",
            "--cuda-graph-max-bs-decode",
            "128",
            "--random-seed",
            "5",
            "--sim-fault",
            "hang-after=3,ignore-sigterm",
        ],
        {"NCCL_ALGO": "Tree", "SPEC_SWEEP_SIM_TIME_SCALE": "0.25"},
    )
    assert config.tp_size == 8
    assert config.cuda_graph_max_bs == 128
    assert config.nccl_algo == "Tree"
    assert options.seed == 5
    assert options.time_scale == 0.25
    assert options.flavor == "new"
    assert options.faults.hang_after == 3
    assert options.faults.ignore_sigterm
    assert options.profile == PCIE


def test_parse_command_line_rejects_like_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_command_line(["--model-path", "m", "--bogus"], {})
    assert exc.value.code == 2
    assert "error: unrecognized arguments: --bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_command_line(["--model-path", "m", "--sim-fault", "explode"], {})
    assert "argument --sim-fault: invalid choice: 'explode'" in capsys.readouterr().err


def test_sglang_0_5_13_refuses_a_port_whose_grpc_port_is_out_of_range() -> None:
    # A real 0.5.13 boot with --port 58199 died with exactly this line (gRPC port = port + 10000).
    old = plan_node(load_profile("rtx-pro-6000-pcie-x8"), _cfg_port("old", 58199))
    assert old.failure is not None
    assert old.failure.where == "main"
    assert "ValueError: SGLANG_GRPC_PORT (68199) must be between 1 and 65535" in old.failure.text
    assert "_handle_deprecated_args" in old.failure.text
    assert plan_node(load_profile("rtx-pro-6000-pcie-x8"), _cfg_port("old", 55535)).failure is None
    # 0.5.23 derives it only in gRPC mode: an HTTP server on a high port boots.
    assert plan_node(load_profile("rtx-pro-6000-pcie-x8"), _cfg_port("new", 58199)).failure is None


def _cfg_port(flavor: str, port: int) -> NodeConfig:
    return NodeConfig(flavor=flavor, model_path="m", tp_size=8, port=port)  # type: ignore[arg-type]


def test_weight_cache_refuses_speculative_decoding_like_0_5_23(pcie: Profile) -> None:
    # arg_groups/model_path_hook.py:281-287: the daemon does not export the draft's weights.
    plan = _plan(pcie, spec=_eagle(), weight_cache_mode="client")
    assert plan.failure is not None
    assert plan.failure.where == "main"
    assert plan.failure.text.endswith(
        "ValueError: --weight-cache-mode is not supported together with speculative decoding "
        "(--speculative-algorithm): the weight cache daemon does not export the draft model's "
        "weights. Disable one of them (--weight-cache-mode off) for this configuration.\n"
    )
    assert _plan(pcie, weight_cache_mode="client").failure is None


def test_sim_speed_paces_every_real_step_and_rejects_a_bad_factor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from spec_sweep.sim.engine import Engine, GenRequest

    argv = ["--model-path", "m"]
    assert parse_command_line(argv, {})[0].speed == 1.0
    assert parse_command_line(argv, {"SPEC_SWEEP_SIM_SPEED": "4"})[0].speed == 4.0
    assert parse_command_line([*argv, "--sim-speed", "2.5"], {})[0].speed == 2.5
    with pytest.raises(SystemExit) as exc:
        parse_command_line([*argv, "--sim-speed", "0"], {})
    assert exc.value.code == 2
    assert "argument --sim-speed: must be > 0, got 0.0" in capsys.readouterr().err
    perf = _perf(load_profile(H200))
    log = None  # never written: no step runs
    engine = Engine(perf, plan=perf.plan, log=log, flavor_old=False, boot_time_scale=0, speed=4)  # type: ignore[arg-type]
    real = GenRequest.__new__(GenRequest)
    real.boot_phase = False
    warmup = GenRequest.__new__(GenRequest)
    warmup.boot_phase = True
    assert engine._pace([real]) == 0.25  # a quarter of the modelled step time
    assert engine._pace([warmup]) == 0.0  # start-up requests keep the boot time scale


def test_sim_pacing_catches_up_a_late_wake_so_host_load_does_not_slow_the_node() -> None:
    """A step that wakes late (a loaded host) is made up by the next ones: the next deadline
    counts from this one's, not from the wake; a stall past the cap is forgiven, not replayed."""
    import asyncio

    from spec_sweep.sim import engine as engine_module
    from spec_sweep.sim.engine import Engine

    perf = _perf(load_profile(H200))
    engine = Engine(perf, plan=perf.plan, log=None, flavor_old=False)  # type: ignore[arg-type]

    async def deadlines() -> tuple[float, float, float, float]:
        loop = asyncio.get_running_loop()
        now = loop.time()
        ahead = await engine._sleep_until(loop, now + 0.01)
        late = await engine._sleep_until(loop, loop.time() - 0.05)
        start = loop.time()
        stalled = await engine._sleep_until(loop, start - 2 * engine_module._MAX_BEHIND_S)
        return ahead - now, start - late, stalled - start, loop.time() - now

    ahead, late_by, stalled, elapsed = asyncio.run(deadlines())
    assert ahead == pytest.approx(0.01)
    assert late_by >= 0.05  # the late step's deadline stands (the next one counts from it)
    assert stalled >= 0.0  # a stall is forgiven: the next deadline counts from now
    assert elapsed < 1.0  # nothing was slept to "replay" the stall


def test_ngram_resolves_like_sglang_0_5_17(pcie: Profile) -> None:
    # the real 0.5.17 log's server_args: steps 0, top-k 10 (the BFS breadth), no draft model
    plan = _plan(pcie, spec=SpecSettings("NGRAM", None, None, 8, None), sglang_version="0.5.17")
    assert plan.failure is None, plan.failure
    assert plan.spec == SpecSettings("NGRAM", 0, 10, 8, None)
    assert plan.main_warnings == [texts.SPEC_MAX_RUNNING_RESET, texts.NGRAM_MIXED_CHUNK_OFF]
    assert plan.max_running_requests == 48
    assert plan.draft_weights_gib == 0.0  # no draft model: no draft weights, KV or graphs
    assert plan.spec.depths == 7
    eagle = _plan(pcie, spec=_eagle(3, 1, 4), cuda_graph_max_bs=32)
    ngram = _plan(pcie, spec=SpecSettings("NGRAM", None, None, 4, None), cuda_graph_max_bs=32)
    assert ngram.max_total_num_tokens > eagle.max_total_num_tokens


def test_ngram_cycle_is_a_match_and_a_verify(pcie: Profile) -> None:
    from spec_sweep.sim.perf import NGRAM_MATCH_MS

    # (graphs to the profile's reference batch: no penalty on the step)
    perf = _perf(pcie, spec=SpecSettings("NGRAM", None, None, 8, None), cuda_graph_max_bs=128)
    expected = perf.verify_ms(1) + pcie.perf.spec_overhead_ms + NGRAM_MATCH_MS
    assert perf.step_ms(1) == pytest.approx(expected)
    # the measured 135M acceptance: 1.45 tokens a cycle of 8 on text
    assert perf.expected_accept_length() == pytest.approx(1.45, abs=0.01)
    assert perf.prefill_ms(100) < _perf(pcie, spec=_eagle()).prefill_ms(100)  # no draft extend


@pytest.mark.parametrize(
    ("spec", "formats", "length"),
    [
        (_eagle(3, 1, 4), {"draft_load_format": "dummy"}, 1.0),
        (_eagle(2, 4, 8), {"load_format": "dummy"}, 1.0),  # the draft follows the target
        (_eagle(3, 1, 4), {"load_format": "dummy", "draft_load_format": "auto"}, 1.0),
        (SpecSettings("NGRAM", None, None, 8, None), {"load_format": "dummy"}, 8.0),
        (SpecSettings("NGRAM", None, None, 8, None), {"draft_load_format": "dummy"}, None),
    ],
)
def test_dummy_weights_fix_the_acceptance(
    pcie: Profile, spec: SpecSettings, formats: dict[str, str], length: float | None
) -> None:
    real = _perf(pcie, spec=spec)
    dummy = _perf(pcie, spec=spec, **formats)
    if length is None:  # NGRAM has no draft model: a dummy draft format changes nothing
        assert dummy.expected_accept_length() == real.expected_accept_length()
    else:
        for natural in (True, False):
            assert dummy.expected_accept_length(natural=natural) == length
    # what a step costs is the real configuration's
    assert dummy.step_ms(8) == real.step_ms(8)


def test_a_dummy_boot_is_another_boot_of_the_configuration(pcie: Profile) -> None:
    real, dummy = _perf(pcie), _perf(pcie, load_format="dummy")
    assert dummy.boot_factor != real.boot_factor  # another boot's run-to-run noise
    assert _perf(pcie, load_format="auto").boot_factor == real.boot_factor


def test_dummy_weight_load_is_an_allocation() -> None:
    from spec_sweep.sim.boot import DUMMY_LOAD_GIB_PER_S, dummy_load_s

    # measured: 0.27 GB in 0.084-0.10 s on an H100, against 0.125-0.15 s from the page cache
    assert 0.084 <= dummy_load_s(0.27, 0.13) <= 0.10
    assert dummy_load_s(73.23, 252.0) == pytest.approx(73.23 / DUMMY_LOAD_GIB_PER_S)
    assert dummy_load_s(10.0, 1.0) == 1.0  # never longer than reading them
