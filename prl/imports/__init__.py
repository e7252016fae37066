"""Other tools' generations: read their files (``formats``), map rows to benchmark problems (``matching``),
store and verify them as an imported run (``run``)."""
