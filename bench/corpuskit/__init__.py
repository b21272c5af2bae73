"""The corpus report's parts: where the files come from (:mod:`.sources`), which family each model is in
(:mod:`.families`, data in ``bench/corpus_families.toml``), migrating (:mod:`.migrating`), probing each migrated
file in its own process (:mod:`.probing`) and the markdown report (:mod:`.markdown`). ``bench/corpus.py`` is the
command."""
