"""The reward-model lab: GRPO against a learned Bradley-Terry reward model on the CPU lab, over-optimisation watched."""
