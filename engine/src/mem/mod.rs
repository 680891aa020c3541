//! (being written) Registered memory, the MR/STag table and placement.
