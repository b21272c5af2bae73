"""Stage 5, edit: the plan's vocabulary (edits), imports a plan needs (imports), dropping edits the user marked
(suppressed), applying every edit in one pass (apply) and formatting only inserted code (render)."""
