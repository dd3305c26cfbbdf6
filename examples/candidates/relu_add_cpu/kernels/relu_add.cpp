// out[i] = max(x[i], 0) + bias[i % cols]
extern "C" void relu_add(const float* x, const float* bias, float* out, long long n, long long cols) {
    for (long long i = 0; i < n; ++i) {
        float v = x[i] > 0.0f ? x[i] : 0.0f;
        out[i] = v + bias[i % cols];
    }
}
