fn main() -> std::process::ExitCode {
    autofactura::cli::run()
}
