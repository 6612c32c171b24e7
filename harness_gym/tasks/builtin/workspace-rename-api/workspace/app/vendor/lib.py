def fetch_data(x):
    return x
