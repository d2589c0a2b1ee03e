"""Weight sync: bucketed collective broadcast, object-store and local strategies, versions."""
