"""The judge lab: GRPO against an LLM judge, watched for when the policy pleases the judge instead of solving."""
