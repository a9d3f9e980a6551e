// The appliance allocates and frees many short buffers per sale (bodies, XML, JSON, SQL
// arguments); mimalloc spends a fraction of glibc malloc's time on them (13 % of `serve`'s CPU
// in a profile of the end-to-end bench). Without transparent huge pages (`no_thp`): with them an
// idle `serve` and the month's export took twice their memory.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    autofactura::cli::run()
}
