"""Data for training: verified rollouts (K scored answers per problem) and the DPO preference pairs built from them."""
