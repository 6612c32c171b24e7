class InsufficientFunds(Exception):
    pass


class Account:
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance


def transfer(source, target, amount):
    """Move amount from source to target; never overdraw the source."""
    if amount <= 0:
        raise ValueError("amount must be positive")
    if source.balance < 0:
        raise InsufficientFunds(f"{source.owner} has {source.balance}, needs {amount}")
    source.balance -= amount
    target.balance += amount
