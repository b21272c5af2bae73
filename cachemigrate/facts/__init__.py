"""Stage 3, facts: what a file's code is, decided once and handed to every rule. Classes, functions and cache
uses (analysis, uses), roles by how classes hand the cache on (roles), layouts and converters (layout, converters,
conversions, boundary), constructs whose blocker is known (constructs), unreachable cache code (reach) and
structures outside the file (outside). Reads code through views; never imports rules, edits or proofs."""
