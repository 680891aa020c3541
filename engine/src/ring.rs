//! (being written) Single-producer single-consumer rings.
