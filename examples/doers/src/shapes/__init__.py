"""A small package the example's doers grow, one module per milestone."""
