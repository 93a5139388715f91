"""Operating a store and its workers: backups (:mod:`.backup`, :mod:`.backup_pg`),
``dormant doctor`` (:mod:`.doctor`), several worker processes on one store
(:mod:`.workers`) and the Prometheus exporter (:mod:`.exporter`).

May import: the store, the governor, the view cache and the root's vocabulary;
the server and the CLI use ops, never the other way round.
"""
