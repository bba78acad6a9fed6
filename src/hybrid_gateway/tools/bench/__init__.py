"""`hybrid-gateway bench run`: workloads replayed through strategies, scored for quality
and cost."""
