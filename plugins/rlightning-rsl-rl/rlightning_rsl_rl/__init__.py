"""RSL-RL's PPO (package ``rsl-rl-lib``) as an rlightning policy."""
