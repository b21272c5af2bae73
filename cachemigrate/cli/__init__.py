"""The command line: options and the pyproject config (options, config), running files in parallel with a
result cache, progress and signals (batch, runner, result_cache, progress, signals), standard input (stdio), and
the click commands (main). Nothing imports this package."""
