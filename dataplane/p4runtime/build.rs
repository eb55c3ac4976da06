//! Compiles the P4Runtime subset in `proto/` with protox (pure Rust, no
//! protoc) and generates the prost messages and the tonic service. The
//! descriptor set is kept too: the P4Info's text format needs it.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["p4/v1/p4runtime.proto"];
    for f in [
        "p4/v1/p4runtime.proto",
        "p4/config/v1/p4info.proto",
        "google/rpc/status.proto",
    ] {
        println!("cargo:rerun-if-changed=proto/{f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("descriptors.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    // The gRPC service and client only with the `server` feature (they
    // need tonic); the messages always.
    let grpc = std::env::var_os("CARGO_FEATURE_SERVER").is_some();
    tonic_prost_build::configure()
        // `bytes` fields as `Bytes`: slices of the received buffer, not
        // a `Vec` each (a 1024-entry Write carries ~8000 of them; decoding
        // it into `Vec`s took ~1 ms of allocations).
        .bytes(".")
        .build_client(grpc)
        .build_server(grpc)
        .compile_fds(fds)?;
    Ok(())
}
