from app.io import fetch_data


def run():
    return fetch_data('users')  # fetch_data reads a table
