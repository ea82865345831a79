from shapes.square import Square


def test_area() -> None:
    assert Square(3).area() == 9
