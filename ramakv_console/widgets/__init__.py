"""The console's widgets, one per module: tables, trace log, header, banner, key bar, forms."""
