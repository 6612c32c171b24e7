import unittest

from ledger.accounts import Account, InsufficientFunds, transfer


class T(unittest.TestCase):
    def test_ok(self):
        a, b = Account("a", 100), Account("b")
        transfer(a, b, 60)
        self.assertEqual((a.balance, b.balance), (40, 60))

    def test_overdraft_refused(self):
        a, b = Account("a", 100), Account("b", 5)
        with self.assertRaises(InsufficientFunds):
            transfer(a, b, 500)
        self.assertEqual((a.balance, b.balance), (100, 5))

    def test_positive(self):
        with self.assertRaises(ValueError):
            transfer(Account("a", 10), Account("b"), 0)
