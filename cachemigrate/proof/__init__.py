"""Stage 6, proof: what is proven of a migrated file before it is written. The region proof (audit), no unbound
name (names), no legacy use left (leftovers) and the first generation step (first_step)."""
