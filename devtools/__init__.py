"""Developer tools outside the product's I/O shell: the local single-node Kafka broker."""
