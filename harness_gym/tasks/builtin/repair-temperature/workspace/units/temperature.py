def celsius_to_fahrenheit(celsius):
    """Degrees Celsius to degrees Fahrenheit."""
    return celsius * 9 / 5 + 32


def fahrenheit_to_celsius(fahrenheit):
    """Degrees Fahrenheit to degrees Celsius."""
    return (fahrenheit + 32) * 5 / 9


def kelvin_to_celsius(kelvin):
    """Kelvin to degrees Celsius; negative kelvin is an error."""
    if kelvin < 0:
        raise ValueError("kelvin cannot be negative")
    return kelvin - 273.15
