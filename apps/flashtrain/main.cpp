// main.cpp — the flashtrain CLI entry point (placeholder body replaced by the CLI work).
int main() { return 0; }
