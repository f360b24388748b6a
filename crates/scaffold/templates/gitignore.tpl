target/
.dev-certs/
