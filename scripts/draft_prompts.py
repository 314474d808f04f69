"""Templated training prompts for `scripts/train_test_draft.py`, written like real user requests.

The draft head learns best from what it will see served: chat turns that read like a user's
request (SpecForge trains on real chat data). Without a network or a dataset, this module
builds such turns combinatorially from hand-written topics and request templates, in four
kinds: concepts (science, computing, mathematics, economics, history, health) explained,
compared or exemplified; programming tasks in the languages where they make sense; creative
writing (poems, stories, letters, product copy); practical advice (tips, plans, checklists).
About a third of the prompts get an extra constraint ("Keep it under 100 words.", "Use a
numbered list.", ...) or a short lead-in, so lengths vary.

Held out: `build_prompt_set` drops every prompt whose topic (the concept, task or subject it was
made from; both for a comparison) occurs, case-insensitively, as a substring of any evaluation
prompt, then every exact duplicate, and says how many of each it dropped. No torch needed.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

#: Concepts by category; neighbours in a list are related, so adjacent pairs compare well.
CONCEPTS: dict[str, tuple[str, ...]] = {
    "science": (
        "photosynthesis",
        "cellular respiration",
        "natural selection",
        "genetic drift",
        "DNA replication",
        "protein folding",
        "the immune system",
        "vaccination",
        "plate tectonics",
        "volcanic eruptions",
        "the water cycle",
        "the carbon cycle",
        "the greenhouse effect",
        "ocean currents",
        "black holes",
        "neutron stars",
        "the Big Bang theory",
        "dark matter",
        "gravitational waves",
        "nuclear fusion",
        "nuclear fission",
        "radioactive decay",
        "quantum entanglement",
        "the uncertainty principle",
        "electromagnetic induction",
        "static electricity",
        "the Doppler effect",
        "sound waves",
        "chemical bonding",
        "acids and bases",
        "catalysts",
        "entropy",
        "superconductivity",
        "osmosis",
        "ecosystems and food webs",
        "symbiosis",
        "the nitrogen cycle",
        "tides",
    ),
    "computing": (
        "recursion",
        "dynamic programming",
        "binary search trees",
        "graph traversal",
        "garbage collection",
        "reference counting",
        "virtual memory",
        "CPU caches",
        "public-key cryptography",
        "digital signatures",
        "TCP congestion control",
        "the domain name system",
        "REST APIs",
        "GraphQL",
        "containerization with Docker",
        "virtual machines",
        "database indexing",
        "database transactions",
        "eventual consistency",
        "the CAP theorem",
        "load balancing",
        "content delivery networks",
        "unit testing",
        "continuous integration",
        "version control with Git",
        "object-oriented programming",
        "functional programming",
        "static typing",
        "dynamic typing",
        "compilers",
        "interpreters",
        "neural networks",
        "gradient descent",
        "overfitting in machine learning",
        "regular expressions",
        "race conditions",
        "deadlocks",
        "big O notation",
    ),
    "mathematics": (
        "prime numbers",
        "the Pythagorean theorem",
        "derivatives",
        "integrals",
        "limits in calculus",
        "probability distributions",
        "Bayes' theorem",
        "the law of large numbers",
        "standard deviation",
        "linear regression",
        "matrices",
        "eigenvalues",
        "complex numbers",
        "logarithms",
        "exponential growth",
        "mathematical induction",
        "set theory",
        "graph theory",
    ),
    "economics": (
        "inflation",
        "deflation",
        "supply and demand",
        "price elasticity",
        "opportunity cost",
        "comparative advantage",
        "interest rates",
        "central banks",
        "compound interest",
        "index funds",
        "the stock market",
        "bonds",
        "diversification",
        "recessions",
        "unemployment",
        "minimum wage laws",
        "tariffs",
        "globalization",
        "monopolies",
        "market competition",
        "cryptocurrencies",
        "venture capital",
        "gross domestic product",
        "budget deficits",
    ),
    "history": (
        "the Industrial Revolution",
        "the printing press",
        "the fall of the Roman Empire",
        "the Byzantine Empire",
        "the Renaissance",
        "the Reformation",
        "the French Revolution",
        "the American Revolution",
        "the Silk Road",
        "the Mongol Empire",
        "the Cold War",
        "the space race",
        "the Meiji Restoration",
        "the Ottoman Empire",
        "ancient Egyptian civilization",
        "Mesopotamian civilization",
        "the Age of Exploration",
        "the abolition of slavery",
        "the women's suffrage movement",
        "the civil rights movement",
        "World War I",
        "World War II",
        "the Great Depression",
        "the fall of the Berlin Wall",
    ),
    "health": (
        "sleep hygiene",
        "circadian rhythms",
        "intermittent fasting",
        "dietary fiber",
        "blood pressure",
        "cholesterol",
        "type 2 diabetes",
        "antibiotic resistance",
        "the gut microbiome",
        "aerobic exercise",
        "strength training",
        "stretching",
        "stress and cortisol",
        "mindfulness meditation",
        "cognitive behavioral therapy",
        "habit formation",
        "procrastination",
        "burnout",
        "dehydration",
        "hydration",
        "vitamin D",
        "posture",
        "allergies",
        "the placebo effect",
    ),
}

CONCEPT_TEMPLATES = (
    "Explain {} to a beginner.",
    "What is meant by {}, and why does it matter?",
    "Summarize the key ideas behind {} in a short paragraph.",
    "What are the most common misconceptions about {}?",
    "Describe {} in simple terms, using an analogy.",
    "What should everyone know about {}?",
    "Give me a brief overview of {}.",
    "How would you teach {} to a high school student?",
    "Write a short explanation of {} with a real-world example.",
)
#: Extra templates for the categories whose topics are phenomena one meets day to day.
EVERYDAY_TEMPLATES = (
    "Give three examples of {} in everyday life.",
    "How does {} work? Walk me through it step by step.",
)
EVERYDAY_CATEGORIES = ("science", "computing", "mathematics", "economics", "health")
HISTORY_TEMPLATES = (
    "What were the main causes and consequences of {}?",
    "Why do historians consider {} so important?",
)
COMPARE_TEMPLATES = (
    "Compare {} and {}.",
    "What is the difference between {} and {}?",
    "Explain how {} relates to {}, with an example.",
)
CONCEPT_SUFFIXES = (
    " Keep it under 100 words.",
    " Use one concrete example.",
    " Answer in two short paragraphs.",
    " Use a numbered list.",
    " Avoid jargon.",
    " End with a one-sentence summary.",
)
CONCEPT_LEADS = (
    "I'm studying for an exam. ",
    "I keep hearing about this at work. ",
    "My kid asked me about this. ",
)

#: Programming tasks for any general-purpose language (all of `LANGUAGES`).
CODE_TASKS = (
    "reverses a linked list",
    "checks whether a string is a palindrome",
    "finds the largest element in an array",
    "removes duplicates from a list",
    "merges two sorted arrays into one sorted array",
    "implements binary search",
    "sorts an array with quicksort",
    "sorts an array with merge sort",
    "counts the words in a text",
    "finds the most frequent character in a string",
    "checks whether two strings are anagrams",
    "computes the greatest common divisor of two numbers",
    "checks whether a number is prime",
    "generates all prime numbers below a limit",
    "converts a decimal number to binary",
    "computes the factorial of a number",
    "rotates a matrix by 90 degrees",
    "transposes a matrix",
    "implements a stack with push and pop",
    "implements a queue using two stacks",
    "detects a cycle in a linked list",
    "finds the middle node of a linked list",
    "computes the depth of a binary tree",
    "performs a breadth-first search on a graph",
    "performs a depth-first search on a graph",
    "finds the shortest path with Dijkstra's algorithm",
    "validates balanced parentheses in a string",
    "converts a Roman numeral to an integer",
    "converts an integer to a Roman numeral",
    "flattens a nested list",
    "finds the longest common prefix of a list of strings",
    "capitalizes the first letter of every word",
    "implements a simple LRU cache",
    "computes a running average of a stream of numbers",
    "finds two numbers in an array that add up to a target",
    "splits a list into chunks of size n",
    "checks whether a year is a leap year",
    "computes the median of a list of numbers",
    "shuffles an array in place",
    "counts the vowels in a string",
    "implements a simple hash map",
    "finds all permutations of a string",
    "generates all subsets of a set",
    "computes the power set of a list",
    "implements run-length encoding",
    "validates an email address",
    "computes the edit distance between two strings",
    "converts Celsius to Fahrenheit",
    "finds the second largest number in a list",
    "sums the digits of an integer",
    "returns the intersection of two lists",
    "reads a text file line by line",
)
#: Tasks that need a standard library with networking, JSON or dates: higher-level languages.
SCRIPTING_TASKS = (
    "parses a JSON file and prints one field",
    "fetches a URL and prints the HTTP status code",
    "reads a CSV file and computes the average of a column",
    "retries a failing operation with exponential backoff",
    "formats a date as YYYY-MM-DD",
    "counts how often each word appears in a file",
    "debounces a function call",
    "validates a password against strength rules",
    "renames every file in a folder to lowercase",
    "writes a dictionary to a JSON file",
)
LANGUAGES = ("Python", "JavaScript", "TypeScript", "Go", "Rust", "Java", "C", "C++")
SCRIPTING_LANGUAGES = ("Python", "JavaScript", "TypeScript", "Go")
CODE_TEMPLATES = (
    "Write a {lang} function that {task}.",
    "In {lang}, how do I write code that {task}? Show an example.",
    "Write a {lang} program that {task}, and explain how it works.",
)
SHELL_TASKS = (
    "finds all files larger than 100 MB in a directory",
    "backs up a folder into a dated archive",
    "counts the lines of code in a project",
    "prints the ten largest files in a directory",
    "deletes log files older than seven days",
    "checks whether a website is up",
    "monitors disk usage and warns above 90 percent",
    "lists the processes using the most memory",
    "replaces a word in every text file of a folder",
    "extracts all email addresses from a file",
    "downloads a list of URLs from a file",
    "renames photos by their modification date",
    "shows the most common IP addresses in an access log",
    "converts all PNG images to JPEG",
)
SHELL_TEMPLATES = (
    "Write a Bash script that {task}.",
    "Give me a one-line shell command that {task}.",
    "Write a shell script that {task}, and explain each line.",
)
SQL_TASKS = (
    "finds duplicate email addresses in a users table",
    "counts the orders per month in an orders table",
    "finds employees who earn more than their manager",
    "lists the products that have never been ordered",
    "computes a running total of sales by date",
    "finds the second highest salary in an employees table",
    "lists customers who placed more than three orders last year",
    "deletes duplicate rows while keeping the oldest one",
    "ranks students by grade within each class",
    "computes the average rating of each movie with at least ten reviews",
    "finds users who logged in on three consecutive days",
    "lists departments together with their headcount",
    "shows the month-over-month growth in revenue",
    "finds the most popular product in each category",
)
SQL_TEMPLATES = (
    "Write a SQL query that {task}.",
    "How would I write a SQL query that {task}? Explain the query.",
    "Write a SQL query that {task}, for PostgreSQL.",
)
CODE_SUFFIXES = (
    " Include a short usage example.",
    " Handle edge cases such as empty input.",
    " Then explain its time complexity.",
    " Add comments to the code.",
    " Keep it short.",
    " Include a few test cases.",
)

CREATIVE_SUBJECTS = (
    "a lighthouse keeper who finds a message in a bottle",
    "the first snow of winter",
    "a robot learning to paint",
    "an old oak tree in a city park",
    "a cat who thinks it is a dog",
    "the last day of summer vacation",
    "a dragon afraid of the dark",
    "a rainy Monday morning",
    "a train journey through the mountains",
    "a grandmother's kitchen",
    "a city that never sleeps",
    "a lost umbrella",
    "the ocean at night",
    "a time traveler stuck in the wrong century",
    "a small bakery at dawn",
    "a friendship between a fox and a crow",
    "the sound of rain on a tin roof",
    "a detective who cannot remember names",
    "an astronaut's first view of Earth",
    "autumn leaves",
    "a village on the edge of a desert",
    "a forgotten birthday",
    "a library after closing time",
    "a garden in spring",
    "a storm at sea",
    "a child's first day at school",
    "a wizard who lost his spellbook",
    "a street musician",
    "a haunted lighthouse",
    "the moon watching over a sleeping town",
    "a mountain hike at sunrise",
    "a bicycle that can fly",
    "an abandoned amusement park",
    "a penguin who wants to fly",
    "the smell of fresh coffee",
    "a message from the future",
    "a busy airport",
    "two strangers sharing an umbrella",
    "a tiny island with one tree",
    "the end of a long war",
    "a farmer waiting for rain",
    "a city covered in fog",
    "a teacher's last class before retirement",
    "a river that flows backwards",
    "a chess game between old friends",
    "a snowman that comes to life",
    "a spaceship running out of fuel",
    "a jazz club in the 1920s",
    "a village festival",
    "a lonely satellite",
    "the night before an exam",
    "a magical bookshop",
    "a dog waiting for its owner",
    "a sunflower field",
    "a lost letter delivered decades late",
    "an inventor's failed experiment",
    "a desert at noon",
    "a quiet Sunday afternoon",
    "a knight who hates fighting",
    "a robot and a child becoming friends",
    "a hidden door in an old house",
    "the first human colony on Mars",
    "a winter night by the fire",
    "a mermaid visiting a city",
    "a thunderstorm in the mountains",
    "a kite on a windy day",
    "a small town's annual talent show",
    "a ghost who is afraid of people",
    "a world without music",
    "a pirate who gets seasick",
    "a cup of tea on a cold day",
    "an elephant who never forgets",
    "a busy marketplace",
    "the changing of the seasons",
    "a clock that runs backwards",
    "a bird building its nest",
    "a midnight train",
    "an owl who cannot sleep at night",
    "a picnic interrupted by rain",
    "the northern lights",
)
CREATIVE_TEMPLATES = (
    "Write a haiku about {}.",
    "Write a short story about {}.",
    "Write a poem about {}.",
    "Write a limerick about {}.",
    "Write the opening paragraph of a novel about {}.",
    "Write a short letter to a friend describing {}.",
)
CREATIVE_SUFFIXES = (
    " Keep it under 100 words.",
    " Make it funny.",
    " Use vivid imagery.",
    " Give it a surprising ending.",
    " Write it for young children.",
    " Make it rhyme.",
)
PRODUCTS = (
    "a reusable water bottle",
    "noise-cancelling headphones",
    "a standing desk",
    "a smart thermostat",
    "an electric toothbrush",
    "a handmade ceramic mug",
    "a lightweight hiking backpack",
    "a solar-powered phone charger",
    "a mechanical keyboard",
    "an indoor herb garden kit",
    "a weighted blanket",
    "a fitness tracker",
    "a cast-iron skillet",
    "a language-learning app",
    "a budget planner notebook",
    "an espresso machine",
    "a pair of running shoes",
    "a bamboo cutting board",
    "a portable Bluetooth speaker",
    "a children's science kit",
    "a meal-planning app",
    "a foldable electric bike",
)
PRODUCT_TEMPLATES = (
    "Write a product description for {}.",
    "Write a catchy advertisement for {}.",
    "Write a short customer review of {}.",
    "Suggest five names for a brand that sells {}.",
)

PRACTICAL_TASKS = (
    "saving money on groceries",
    "preparing for a job interview",
    "learning a new language",
    "starting a vegetable garden",
    "training a puppy",
    "running a first marathon",
    "moving to a new city",
    "planning a wedding on a budget",
    "writing a resume",
    "negotiating a salary",
    "paying off credit card debt",
    "building an emergency fund",
    "buying a used car",
    "renting a first apartment",
    "organizing a small closet",
    "meal prepping for the week",
    "cooking for a large group",
    "hosting a dinner party",
    "planning a two-week trip to Japan",
    "traveling with young children",
    "packing light for travel",
    "improving public speaking skills",
    "managing time while working from home",
    "staying focused while studying",
    "learning to play the guitar",
    "starting a podcast",
    "growing a small online business",
    "writing a business plan",
    "asking for a promotion",
    "dealing with a difficult coworker",
    "making friends as an adult",
    "reducing screen time",
    "getting better sleep",
    "starting a home workout routine",
    "drinking more water",
    "quitting sugar",
    "decluttering a home",
    "reducing household energy use",
    "keeping houseplants alive",
    "caring for a new kitten",
    "teaching a child to read",
    "helping a teenager with homework",
    "preparing for a marathon study session",
    "choosing a laptop for programming",
    "setting up a home network",
    "protecting personal data online",
    "creating strong passwords",
    "backing up family photos",
    "learning to code as an adult",
    "switching careers into data science",
    "preparing a wedding toast",
    "writing a thank-you note",
    "planning a birthday party for a child",
    "training for a 5K run",
    "choosing a health insurance plan",
    "reducing food waste",
    "composting at home",
    "painting a room",
    "fixing a leaky faucet",
    "assembling flat-pack furniture",
    "planning a road trip",
    "camping for the first time",
    "learning to swim as an adult",
    "overcoming stage fright",
    "building a reading habit",
    "keeping a journal",
    "budgeting as a college student",
    "applying to graduate school",
    "writing a cover letter",
    "running an effective meeting",
    "giving constructive feedback",
    "onboarding a new employee",
    "managing a remote team",
    "preparing for a performance review",
    "buying a first home",
    "saving for retirement",
    "choosing a pet for a small apartment",
    "organizing a community cleanup",
    "volunteering abroad",
    "learning to cook healthy meals",
)
PRACTICAL_TEMPLATES = (
    "Give me five tips for {}.",
    "Make a step-by-step plan for {}.",
    "What are the most common mistakes to avoid when {}?",
    "Write a checklist for {}.",
    "What is the best way to get started with {}?",
    "What are the pros and cons of different approaches to {}?",
)
PRACTICAL_SUFFIXES = (
    " Use a numbered list.",
    " Keep it under 100 words.",
    " Give one example for each point.",
    " Assume I have a tight budget.",
    " Be specific and practical.",
    " Explain why each step matters.",
)
PRACTICAL_LEADS = (
    "I have never done this before. ",
    "I only have a few hours a week. ",
    "A friend recommended asking you. ",
)

#: Share of prompts that get a constraint suffix, and of those eligible that get a lead-in.
SUFFIX_SHARE = 0.35
LEAD_SHARE = 0.12


class PromptSet(NamedTuple):
    """The templated prompts (shuffled by seed) and how they were filtered."""

    prompts: list[str]
    kinds: list[str]  # per prompt: concept, code, creative or practical
    stats: dict[str, object]


Candidate = tuple[str, str, tuple[str, ...]]  # (kind, base prompt, topics it was made from)


def _concept_candidates() -> list[Candidate]:
    out: list[Candidate] = []
    for category, topics in CONCEPTS.items():
        templates = list(CONCEPT_TEMPLATES)
        if category in EVERYDAY_CATEGORIES:
            templates += EVERYDAY_TEMPLATES
        if category == "history":
            templates += HISTORY_TEMPLATES
        for topic in topics:
            out += [("concept", t.format(topic), (topic,)) for t in templates]
        # pairs of neighbours one and two apart; a topic with its own "and" reads badly in
        # "Compare {} and {}", so it is not compared
        single = [t for t in topics if " and " not in t]
        for gap in (1, 2):
            for i in range(len(single) - gap):
                pair = (single[i], single[i + gap])
                out += [("concept", t.format(*pair), pair) for t in COMPARE_TEMPLATES]
    return out


def _code_candidates() -> list[Candidate]:
    out: list[Candidate] = []
    for task in CODE_TASKS:
        for lang in LANGUAGES:
            out += [("code", t.format(lang=lang, task=task), (task,)) for t in CODE_TEMPLATES]
    for task in SCRIPTING_TASKS:
        for lang in SCRIPTING_LANGUAGES:
            out += [("code", t.format(lang=lang, task=task), (task,)) for t in CODE_TEMPLATES]
    for task in SHELL_TASKS:
        out += [("code", t.format(task=task), (task,)) for t in SHELL_TEMPLATES]
    for task in SQL_TASKS:
        out += [("code", t.format(task=task), (task,)) for t in SQL_TEMPLATES]
    return out


def _candidates() -> list[Candidate]:
    """Every candidate in a fixed order, before constraints and filtering."""
    out = _concept_candidates() + _code_candidates()
    for subject in CREATIVE_SUBJECTS:
        out += [("creative", t.format(subject), (subject,)) for t in CREATIVE_TEMPLATES]
    for product in PRODUCTS:
        out += [("creative", t.format(product), (product,)) for t in PRODUCT_TEMPLATES]
    for task in PRACTICAL_TASKS:
        out += [("practical", t.format(task), (task,)) for t in PRACTICAL_TEMPLATES]
    return out


_SUFFIXES = {
    "concept": CONCEPT_SUFFIXES,
    "code": CODE_SUFFIXES,
    "creative": CREATIVE_SUFFIXES,
    "practical": PRACTICAL_SUFFIXES,
}
_LEADS = {"concept": CONCEPT_LEADS, "practical": PRACTICAL_LEADS}


def build_prompt_set(eval_prompts: Iterable[str], *, seed: int, variants: int = 1) -> PromptSet:
    """The templated prompts, none made from a topic that occurs in `eval_prompts`.

    Each candidate draws its constraint and lead-in from a `random.Random(seed)` in a fixed
    order (so a seed gives the same set whatever is dropped), then candidates whose topic is a
    case-insensitive substring of an evaluation prompt are dropped, then exact duplicates (and
    any prompt equal to an evaluation prompt); the rest are shuffled by the same generator.
    With `variants` > 1 each candidate also comes as that many - 1 more prompts, each with a
    constraint of its kind (and sometimes a lead-in): the same request worded for another
    answer, so the target's greedy responses (the training data) differ too.
    """
    rng = random.Random(seed)
    held_out = [p.lower() for p in eval_prompts]
    held_out_exact = {p.strip() for p in eval_prompts}
    prompts: list[str] = []
    kinds: list[str] = []
    seen: set[str] = set()
    dropped_topic = dropped_dup = 0
    dropped_topics: set[str] = set()
    candidates = [
        (kind, base, topics, variant)
        for kind, base, topics in _candidates()
        for variant in range(max(1, variants))
    ]
    for kind, base, topics, variant in candidates:
        text = base
        if variant > 0 or rng.random() < SUFFIX_SHARE:
            text += rng.choice(_SUFFIXES[kind])
        if kind in _LEADS and rng.random() < LEAD_SHARE:
            text = rng.choice(_LEADS[kind]) + text
        hit = [t for t in topics if any(t.lower() in h for h in held_out)]
        if hit:
            dropped_topic += 1
            dropped_topics.update(hit)
            continue
        if text in seen or text in held_out_exact:
            dropped_dup += 1
            continue
        seen.add(text)
        prompts.append(text)
        kinds.append(kind)
    order = list(range(len(prompts)))
    rng.shuffle(order)
    prompts = [prompts[i] for i in order]
    kinds = [kinds[i] for i in order]
    digest = hashlib.sha256("\n".join(prompts).encode()).hexdigest()[:16]
    stats: dict[str, object] = {
        "candidates": len(candidates),
        "dropped_eval_topic": dropped_topic,
        "dropped_eval_topics": sorted(dropped_topics),
        "dropped_duplicate": dropped_dup,
        "prompts": len(prompts),
        "by_kind": dict(sorted(Counter(kinds).items())),
        "sha256_16": digest,
    }
    return PromptSet(prompts, kinds, stats)
