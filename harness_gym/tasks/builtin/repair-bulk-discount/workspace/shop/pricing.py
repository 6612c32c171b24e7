"""Line pricing for the shop."""


def line_total(unit_price, quantity):
    """Total for one order line after volume discounts, rounded to cents."""
    if quantity < 0:
        raise ValueError("quantity must not be negative")
    rate = 0.0
    if quantity >= 50:
        rate = 0.20
    return round(unit_price * quantity * (1 - rate), 2)
