"""The judge lab: GRPO against an LLM judge, with a tracker that shows when the policy starts pleasing the judge instead of solving problems."""
