from shapes.registry import SHAPES, make


def test_every_shape_is_registered() -> None:
    assert sorted(SHAPES) == ["circle", "square"]
    assert make("square", 2).area() == 4
