"""Stage 4, rules: the rule files as data. Their schema and validation (schema), loading an era's rule set
(loader, eras), what an era's runtime removed (removed), vendored helpers (vendor), the holes bound per function
(holes), the normalised views of a file's functions (file_views), and planning every rule's edits on the
original tree (planning). Hands the engine a Plan."""
