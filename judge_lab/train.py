"""The reward-hacking lab's command: the GRPO recipe (``recipes.grpo``) on a judge-lab config, under its old name.

    # GPU: start a judge server first (docs/judge_lab.md), then one of the four settings
    python -m judge_lab.train --config recipes/configs/judge_lab/qwen2.5-0.5b-instruct/judge_lab_judge_b0.yaml
    python -m judge_lab.train --config recipes/configs/judge_lab/qwen2.5-0.5b-instruct/judge_lab_checker_b0.yaml
    python -m judge_lab.report runs/judge_lab_judge_b0 runs/judge_lab_checker_b0 --out runs/judge_lab_report
    # CPU, tiny local model (mechanics only; the tiny model also serves as a garbage judge)
    python -m judge_lab.train --config recipes/configs/judge_lab/tiny/judge_lab_tiny_judge_b0.04.yaml

Each of these is exactly ``python -m recipes.grpo`` with the same arguments: a judge-lab config is a GRPO config whose
training set is one question (``question``, ``gold_answer``, ``instruction``), whose reward is the judge
(``llm_judge`` with the ``judge_*`` settings) with the strict checker beside it at weight 0 (the monitors' verdict,
never trained on), which tracks two replies (``tracked_names``, ``tracked_answers``), checks one update per group and
adds the per-step answer log (``callbacks: [judge_lab.tracker:lab_step_log]``). The recipe's monitors, hack probes,
``log.jsonl`` and ``report.json`` come with it, as in any GRPO run. What to look for is in docs/judge_lab.md.
"""

from __future__ import annotations

from recipes import grpo, validate
from recipes.grpo import make_parser  # noqa: F401  (the recipe's parser: python -m judge_lab.train --help)


def main(script_args, training_args, model_args):
    """``recipes.grpo.main`` with the same arguments, saying so."""
    print("judge_lab.train runs the GRPO recipe: python -m recipes.grpo with the same arguments")
    return grpo.main(script_args, training_args, model_args)


if __name__ == "__main__":
    validate.run_cli(make_parser, main)
