//! Backend comparison bench (filled in by the next commit).

fn main() {}
