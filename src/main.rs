// The appliance allocates and frees many short buffers per sale (bodies, XML, JSON, SQL
// arguments); mimalloc does that in a fraction of glibc malloc's time (13 % of `serve`'s CPU in
// a profile of the end-to-end bench).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    autofactura::cli::run()
}
