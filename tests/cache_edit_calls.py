"""The calls the proof of cache-editing code makes (cachemigrate/probe/edits.py), per fixture of
fixtures/cache_edits/: each runs on a tuple past (the original) and on a DynamicCache of the same tensors (the
migrated helper). The past has 3 layers of [2, 2, 7, 4] tensors."""

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cache_edits"

CALLS = {
    "rollback/speculative.py": [
        {"function": "rollback", "args": ["PAST", 5]},
        {"function": "rollback", "args": ["PAST", -2]},
        {"function": "rollback", "args": ["PAST", 0]},
        {"function": "rollback", "args": ["PAST", 9]},
        {"function": "drop_rejected", "args": ["PAST", 1, 3]},
        {"function": "verify_step", "args": ["PAST", {"tensor": [[1, 2, 3]]}, {"tensor": [[1, 2, 4]]}]},
        {"function": "should_verify", "args": ["PAST", 3]},
    ],
    "window/sinks.py": [
        {"function": "evict", "args": ["PAST", 2, 3]},
        {"function": "evict", "args": ["PAST", 1, 1]},
        {"function": "evict", "args": ["PAST", 4, 4]},
        {"function": "keep_recent", "args": ["PAST", 3]},
        {"function": "compress", "args": ["PAST", [3, 5, 2]]},
    ],
    "count/inspect_cache.py": [
        {"function": "cache_stats", "args": ["PAST"]},
        {"function": "layer_norms", "args": ["PAST", 1]},
        {"function": "layer_norms", "args": ["PAST", -1]},
        {"function": "total_positions", "args": ["PAST"]},
        {"function": "describe", "args": ["PAST"]},
        {"function": "last_layer_means", "args": ["PAST"]},
        {"function": "key_norms", "args": ["PAST"]},
        {"function": "value_dtypes", "args": ["PAST"]},
    ],
}
