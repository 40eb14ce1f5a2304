//! Compiles the small C helper that gives INCRBYFLOAT C's `long double` arithmetic.

fn main() {
    println!("cargo:rerun-if-changed=csrc/longdouble.c");
    cc::Build::new()
        .file("csrc/longdouble.c")
        .warnings(true)
        .compile("lattice_longdouble");
}
