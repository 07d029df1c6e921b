"""The one place that joins domain and store: each operation loads, decides (domain),
writes conditionally (store) and reports its effects (``effects``) for the facade to
hand on. Synchronous: callers run it through ``executors.Executors``."""
