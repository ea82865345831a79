import math

from shapes.circle import Circle


def test_area() -> None:
    assert math.isclose(Circle(2).area(), 4 * math.pi)
