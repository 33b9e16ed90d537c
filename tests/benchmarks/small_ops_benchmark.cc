// Placeholder until the small-op benchmark lands.
int main() { return 0; }
