"""Operating a store and its workers: backups (:mod:`.backup`, :mod:`.backup_pg`),
``dormant doctor`` (:mod:`.doctor`), several worker processes on one store
(:mod:`.workers`), the Prometheus exporter (:mod:`.exporter`) and the part files
``dormant export`` writes beside its JSONL (:mod:`.partfiles`).

May import: the store, the governor, the view cache and the root's vocabulary;
the server and the CLI use ops, never the other way round.
"""
