target/
.dev-certs/
.git/
