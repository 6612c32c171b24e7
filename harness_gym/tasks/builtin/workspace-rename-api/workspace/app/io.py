def fetch_data(table):
    return [table]


def fetch_data_later(table):
    return fetch_data(table)
