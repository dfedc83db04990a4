"""The raw folder: its layout and manifests, the record schemas the warehouse loads, the
run's seal, and the S3-compatible object store for nodes that share no filesystem."""
