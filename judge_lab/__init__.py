"""The judge lab: GRPO against an LLM judge, and a tracker that shows when the policy starts pleasing the judge instead
of solving problems."""
