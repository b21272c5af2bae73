"""Stage 2, views: how code is read for matching. Ranks inferred from syntax (ranks), the normalised spelling of
expressions and statements (expressions, normalize) and the template patterns rules are written in (patterns).
Views are for matching only; they never reach the output. Imports nothing from facts or later stages."""
