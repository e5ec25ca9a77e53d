"""Small ports the pure step logic depends on; adapters implement them."""
