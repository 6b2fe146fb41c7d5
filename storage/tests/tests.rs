//! storage tests
