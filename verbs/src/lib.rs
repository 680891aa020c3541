//! (being written) The Warpcore verbs API.
#![forbid(unsafe_code)]
