"""Held-out evaluation prompts: never used by calibration (salience.CALIBRATION_PROMPTS), the draft search
(tune.EVAL_PROMPTS), the layer-skip search (runner.CALIB_TEXTS), nor the old benchmark set (bench.PROMPTS),
which the tuner's final validation pick used. Two per category; ``check_disjoint`` is tested.

The draft allocation is chosen on the other sets; figures reported on this set are out of sample.
"""
from __future__ import annotations

HELDOUT = (
    ("chat", "My neighbour's dog barks all night. How can I talk to them about it politely?"),
    ("chat", "What are some good habits for a relaxing evening routine?"),
    ("code", "Write a C function that counts the number of set bits in an unsigned integer."),
    ("code", "In JavaScript, how do I remove duplicate values from an array? Show two ways."),
    ("math", "A shop sells pencils at 3 for 45 cents. How much do 14 pencils cost? Explain."),
    ("math", "What is the derivative of x^3 * sin(x)? Show the product rule step by step."),
    ("translation", "Translate into German: 'The library opens at nine and closes at six on weekdays.'"),
    ("translation", "Translate into Italian: 'Could you tell me where the train station is, please?'"),
    ("summarisation", "Summarise in two sentences: The Great Barrier Reef, off the coast of Queensland, is the "
                      "world's largest coral reef system. It is made of nearly three thousand individual reefs "
                      "and hundreds of islands. Rising sea temperatures have caused several mass bleaching "
                      "events, and scientists warn that the reef's long-term survival depends on cutting "
                      "greenhouse gas emissions."),
    ("summarisation", "Give a one-paragraph summary: Alexander Fleming noticed in 1928 that a mould had killed "
                      "the bacteria growing on one of his culture plates. The mould produced a substance he "
                      "called penicillin. It took more than a decade, and the work of Florey and Chain, before "
                      "penicillin could be produced in quantity and used to treat infections."),
    ("reasoning", "If all bloops are razzies and some razzies are lazzies, must some bloops be lazzies? "
                  "Think it through step by step."),
    ("reasoning", "Anna is older than Ben, and Ben is older than Carla. Dan is younger than Carla. Who is the "
                  "second oldest? Explain your reasoning."),
)

CATEGORIES = ("chat", "code", "math", "translation", "summarisation", "reasoning")


def prompts() -> list[str]:
    return [p for _, p in HELDOUT]


def check_disjoint() -> list[str]:
    """Prompts of this set that also occur in (or contain / are contained in) a set used for tuning,
    calibration or the old benchmark. Empty = disjoint."""
    from .bench import PROMPTS
    from .runner import CALIB_TEXTS
    from .salience import CALIBRATION_PROMPTS
    from .tune import EVAL_PROMPTS

    used = [s.lower() for s in (*PROMPTS, *CALIB_TEXTS, *CALIBRATION_PROMPTS, *EVAL_PROMPTS)]
    bad = []
    for p in prompts():
        q = p.lower()
        if any(q in u or u in q for u in used):
            bad.append(p)
    return bad
