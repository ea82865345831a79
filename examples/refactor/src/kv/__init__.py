"""kv: a tiny key-value toolkit, the example refactor's package.

Its modules: ``interfaces`` (the protocols), ``mod_a`` (a reader),
``mod_b`` (a writer) and ``mod_c`` (a counter built on the writer)."""
