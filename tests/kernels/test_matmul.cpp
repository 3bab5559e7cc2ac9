// Matmul against an fp64 reference: every layout combination of a, b and c
// (row- and column-major, transposed views), every precision (fp32, tf32, bf16,
// fp16, fp64, and bf16/fp16 into fp32), odd sizes, batches (shared operands,
// padded, transposed and sliced batches), 4-D batches [B, H, M, N] (folded into
// one call, or attention's permuted heads), views that are not 16-byte aligned,
// and one launch per matmul on the GPU. On the GPU also: the plan cache, the
// workspace kept per stream (repeated matmuls allocate nothing), two host
// threads on two streams at once (with and without the plan's lock), and a
// matmul captured into a CUDA graph.
#include "kernels/test_matmul_support.hpp"

#if defined(FUSOR_TEST_CUDA)
#include <exception>
#include <thread>
#include <vector>

#include <fusor/graph/capture.hpp>
#include <fusor/kernels/matmul_bias_gradient.hpp>
#endif

using namespace matmul_test;

namespace {
struct sizes {
  index_t m, n, k;
};
constexpr sizes odd_sizes[] = {{1, 1, 1}, {3, 17, 5}, {17, 3, 129}, {33, 65, 7}};
constexpr form all_forms[] = {form::row_major, form::col_major, form::transposed_row_major, form::transposed_col_major};

// c = a b with a and b stored in forms fa and fb, c row- or column-major.
template <class P, class PC = P>
void check_product(form fa, form fb, bool c_row_major, sizes s, std::uint32_t seed) {
  const auto a_values = random_host<P>(matrix(s.m, s.k), seed);
  const auto b_values = random_host<P>(matrix(s.k, s.n), seed + 1);
  const product want = reference_product(a_values, b_values, 1, s.m, s.n, s.k);
  INFO("a ", name(fa), ", b ", name(fb), ", c ", c_row_major ? "row-major" : "column-major", ", [m, n, k] = [", s.m,
       ", ", s.n, ", ", s.k, "]");
  with_operand(fa, a_values, [&](const auto& a) {
    with_operand(fb, b_values, [&](const auto& b) {
      const auto run = [&](const auto& c) {
        poison(c);
        executor ex{};
        const auto before = launches();
        matmul(c, a, b, ex);
        finish(ex);
        CHECK(launches() - before == launches_per_matmul);
        expect_product(to_host(c), want, matmul_tolerance<P, PC>());
      };
      if (c_row_major) run(space_tensor<PC, matrix>(s.m, s.n));
      else run(space_tensor<PC, matrix, col_major>(s.m, s.n));
    });
  });
}
}  // namespace

FUSOR_TEST_CASE("matmul: every layout of a, b and c, odd sizes (fp32)") {
  std::uint32_t seed = 100;
  for (sizes s : odd_sizes)
    for (form fa : all_forms)
      for (form fb : all_forms)
        for (bool c_row_major : {true, false}) check_product<float>(fa, fb, c_row_major, s, seed += 2);
}

FUSOR_TEST_CASE("matmul: every layout of a, b and c (bf16)") {
  std::uint32_t seed = 300;
  for (form fa : all_forms)
    for (form fb : all_forms)
      for (bool c_row_major : {true, false}) check_product<bf16>(fa, fb, c_row_major, {19, 24, 40}, seed += 2);
}

FUSOR_TEST_CASE("matmul: every precision against fp64 (fp32, tf32, bf16, fp16, fp64, half into float)") {
  std::uint32_t seed = 500;
  for (sizes s : {sizes{1, 1, 1}, sizes{17, 33, 129}, sizes{64, 48, 256}, sizes{129, 3, 17}}) {
    const form fa = form::row_major, fb = form::transposed_row_major;  // a Linear layer's x w^T
    check_product<fp32>(fa, fb, true, s, seed += 2);
    check_product<tf32>(fa, fb, true, s, seed += 2);
    check_product<bf16>(fa, fb, true, s, seed += 2);
    check_product<fp16>(fa, fb, true, s, seed += 2);
    check_product<fp64>(fa, fb, true, s, seed += 2);
    check_product<bf16, fp32>(fa, fb, true, s, seed += 2);
    check_product<fp16, fp32>(fa, fb, true, s, seed += 2);
    check_product<tf32>(form::col_major, form::row_major, false, s, seed += 2);
    check_product<fp16>(form::transposed_col_major, form::col_major, false, s, seed += 2);
  }
}

FUSOR_TEST_CASE("batched matmul: dense batches, a shared b, a shared a") {
  const index_t batch = 3, m = 5, n = 7, k = 9;
  const auto a_values = random_host<float>(batch_of_matrices(batch, m, k), 11);
  const auto b_values = random_host<float>(batch_of_matrices(batch, k, n), 12);
  const auto shared_a = random_host<float>(matrix(m, k), 13);
  const auto shared_b = random_host<float>(matrix(k, n), 14);
  const double tol = matmul_tolerance<float, float>();
  const auto a = to_space(a_values), b = to_space(b_values);
  const auto a2 = to_space(shared_a), b2 = to_space(shared_b);
  space_tensor<float, batch_of_matrices> c(batch, m, n);
  executor ex{};
  const auto run = [&](const auto& x, const auto& y, const auto& x_host, const auto& y_host, const char* what) {
    INFO(what);
    poison(c);
    const auto before = launches();
    matmul(c, x, y, ex);
    finish(ex);
    CHECK(launches() - before == launches_per_matmul);
    expect_product(to_host(c), reference_product(x_host, y_host, batch, m, n, k), tol);
  };
  run(a, b, a_values, b_values, "a [3, 5, 9] times b [3, 9, 7]");
  run(a, b2, a_values, shared_b, "a [3, 5, 9] times a shared b [9, 7] (one GEMM of 15 rows)");
  run(a2, b, shared_a, b_values, "a shared a [5, 9] times b [3, 9, 7]");
  run(a2, b2, shared_a, shared_b, "both shared");
}

FUSOR_TEST_CASE("batched matmul: padded rows, transposed batches, a sliced batch of c, column-major c, a batch apart") {
  const index_t batch = 3, m = 6, n = 5, k = 4;
  // a: the first k columns of [batch, m, k + 3] (row stride k + 3); b: each
  // matrix transposed ([batch, n, k] permuted); c: batches 1..3 of [batch + 2, m, n].
  const auto a_padded_host = random_host<float>(batch_of_matrices(batch, m, k + 3), 21);
  const auto b_transposed_host = random_host<float>(batch_of_matrices(batch, n, k), 22);
  const auto a_host = slice<2>(a_padded_host.view(), 0, k);
  const auto b_host = permute<0, 2, 1>(b_transposed_host.view());
  const product want = reference_product(a_host, b_host, batch, m, n, k);
  const double tol = matmul_tolerance<float, float>();
  const auto a_padded = to_space(a_padded_host), b_transposed = to_space(b_transposed_host);
  const auto a = slice<2>(a_padded.view(), 0, k);
  const auto b = permute<0, 2, 1>(b_transposed.view());
  executor ex{};
  {
    space_tensor<float, batch_of_matrices> c_big(batch + 2, m, n);
    poison(c_big);
    matmul(slice<0>(c_big.view(), 1, batch + 1), a, b, ex);
    finish(ex);
    const auto got = to_host(c_big);
    expect_product(slice<0>(got.view(), 1, batch + 1), want, tol);
    index_t untouched = 0;
    for (index_t t : {index_t(0), batch + 1})
      for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) untouched += std::isnan(to_double(got(t, i, j)));
    CHECK(untouched == 2 * m * n);  // batches outside the slice are not written
  }
  {
    // c column-major per matrix: [batch, n, m] permuted to [batch, m, n].
    space_tensor<float, batch_of_matrices> c_transposed(batch, n, m);
    poison(c_transposed);
    matmul(permute<0, 2, 1>(c_transposed.view()), a, b, ex);
    finish(ex);
    const auto got = to_host(c_transposed);
    expect_product(permute<0, 2, 1>(got.view()), want, tol);
  }
  {
    // A shared b, a's matrices apart in memory (rows 1..m of [batch, m + 2, k]):
    // the batch cannot run as one GEMM, b's batch stride is 0.
    const auto a_apart_host = random_host<float>(batch_of_matrices(batch, m + 2, k), 23);
    const auto shared_b_host = random_host<float>(matrix(k, n), 24);
    const auto a_apart = to_space(a_apart_host);
    const auto shared_b = to_space(shared_b_host);
    space_tensor<float, batch_of_matrices> c(batch, m, n);
    poison(c);
    matmul(c, slice<1>(a_apart.view(), 1, m + 1), shared_b, ex);
    finish(ex);
    expect_product(to_host(c), reference_product(slice<1>(a_apart_host.view(), 1, m + 1), shared_b_host, batch, m, n, k),
                   tol);
  }
}

FUSOR_TEST_CASE("4-D matmul [B, H, M, N]: contiguous batches in one call, attention's permuted heads in B calls") {
  using four = dextents<index_t, 4>;
  const index_t batch = 2, heads = 3, tokens = 7, head_dim = 5;
  const double tol = matmul_tolerance<float, float>();
  executor ex{};
  {
    // a [B, H, M, K] and b [B, H, K, N] contiguous: the batch axes fold, one strided-batched call.
    const index_t m = 4, n = 6, k = 9;
    const auto a_host = random_host<float>(four(batch, heads, m, k), 41);
    const auto b_host = random_host<float>(four(batch, heads, k, n), 42);
    const auto a = to_space(a_host);
    const auto b = to_space(b_host);
    space_tensor<float, four> c(batch, heads, m, n);
    poison(c);
    const auto before = launches();
    matmul(c, a, b, ex);
    finish(ex);
    CHECK(launches() - before == launches_per_matmul);
    expect_product(to_host(c), reference_product(a_host, b_host, batch * heads, m, n, k), tol);
  }
  {
    // Attention's scores s = q k^T: q and k stored [B, T, H, D], seen as
    // [B, H, T, D] and [B, H, D, T]; the heads are D apart, the batches T H D:
    // no single batch stride, so one call of H per b.
    const auto q_host = random_host<float>(four(batch, tokens, heads, head_dim), 43);
    const auto k_host = random_host<float>(four(batch, tokens, heads, head_dim), 44);
    const auto q = to_space(q_host);
    const auto k = to_space(k_host);
    space_tensor<float, four> s(batch, heads, tokens, tokens);
    poison(s);
    const auto before = launches();
    matmul(s, permute<0, 2, 1, 3>(q.view()), permute<0, 2, 3, 1>(k.view()), ex);
    finish(ex);
    CHECK(launches() - before == batch * launches_per_matmul);
    expect_product(to_host(s),
                   reference_product(permute<0, 2, 1, 3>(q_host.view()), permute<0, 2, 3, 1>(k_host.view()),
                                     batch * heads, tokens, tokens, head_dim),
                   tol);
    // A 2-D b shared by every batch and head: y = q w, w [D, 8].
    const auto w_host = random_host<float>(matrix(head_dim, 8), 45);
    const auto w = to_space(w_host);
    space_tensor<float, four> y(batch, heads, tokens, 8);
    poison(y);
    matmul(y, permute<0, 2, 1, 3>(q.view()), w, ex);
    finish(ex);
    expect_product(to_host(y), reference_product(permute<0, 2, 1, 3>(q_host.view()), w_host, batch * heads, tokens, 8, head_dim),
                   tol);
  }
  // Batch axes that differ (equal products): a shape_error naming the three shapes.
  space_tensor<float, four> c(2, 3, 4, 4), a(3, 2, 4, 4), b(2, 3, 4, 4);
  expect_error<shape_error>([&] { matmul(c, a, b, ex); }, {"batch axes differ", "[2, 3, 4, 4]", "[3, 2, 4, 4]"});
}

FUSOR_TEST_CASE("matmul: operands whose data is not 16-byte aligned still compute correctly") {
  const index_t m = 19, n = 24, k = 32;
  const auto run = [&]<class P>(P) {
    // Each operand starts one element into its storage.
    const auto a_big_host = random_host<P>(matrix(m, k + 1), 31);
    const auto b_big_host = random_host<P>(matrix(k + 1, n), 32);
    const auto a_big = to_space(a_big_host), b_big = to_space(b_big_host);
    space_tensor<P, matrix> c_big(m, n + 1);
    poison(c_big);
    executor ex{};
    matmul(slice<1>(c_big.view(), 1, n + 1), slice<1>(a_big.view(), 1, k + 1), slice<0>(b_big.view(), 1, k + 1), ex);
    finish(ex);
    const auto got = to_host(c_big);
    expect_product(slice<1>(got.view(), 1, n + 1),
                   reference_product(slice<1>(a_big_host.view(), 1, k + 1), slice<0>(b_big_host.view(), 1, k + 1), 1,
                                     m, n, k),
                   matmul_tolerance<P, P>());
  };
  run(float{});
  run(bfloat16{});
}

FUSOR_TEST_CASE("matmul: tensors with static shapes") {
  using a_shape = extents<int, 4, 6>;
  using b_shape = extents<int, 6, 3>;
  using c_shape = extents<int, 4, 3>;
  const auto a_host = random_host<float>(a_shape{}, 41);
  const auto b_host = random_host<float>(b_shape{}, 42);
  const auto a = to_space(a_host);
  const auto b = to_space(b_host);
  space_tensor<float, c_shape> c;
  poison(c);
  executor ex{};
  matmul(c, a, b, ex);
  finish(ex);
  expect_product(to_host(c), reference_product(a_host, b_host, 1, 4, 3, 6), matmul_tolerance<float, float>());
}

#if defined(FUSOR_TEST_CUDA)
FUSOR_TEST_CASE("cuBLASLt plans are cached per configuration") {
  const auto a = to_space(random_host<float>(matrix(37, 41), 51));
  const auto b = to_space(random_host<float>(matrix(41, 43), 52));
  space_tensor<float, matrix> c(37, 43);
  executor ex{};
  const auto before = detail::cublaslt_cached_plans();
  matmul(c, a, b, ex);
  CHECK(detail::cublaslt_cached_plans() == before + 1);
  matmul(c, a, b, ex);  // same configuration: no new plan
  CHECK(detail::cublaslt_cached_plans() == before + 1);
  matmul(c, a, b, epilogue::relu(), ex);  // another epilogue: a new plan
  CHECK(detail::cublaslt_cached_plans() == before + 2);
  finish(ex);
}

namespace {
// A weight-gradient product dw = dy^T x with db = column sums of dy, and its references.
struct weight_gradient_case {
  index_t rows, n, k;
  host_tensor<float, matrix> dy_host, x_host;
  space_tensor<float, matrix> dy, x;
  product dw_want;
  std::vector<double> db_want, db_scale;
  weight_gradient_case(index_t rows_, index_t n_, index_t k_, std::uint32_t seed)
      : rows(rows_), n(n_), k(k_), dy_host(random_host<float>(matrix(rows_, n_), seed)),
        x_host(random_host<float>(matrix(rows_, k_), seed + 1)), dy(to_space(dy_host)), x(to_space(x_host)),
        dw_want(reference_product(transpose(dy_host.view()), x_host, 1, n_, k_, rows_)),
        db_want(std::size_t(n_), 0.0), db_scale(std::size_t(n_), 0.0) {
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < n; ++j) {
        db_want[std::size_t(j)] += to_double(dy_host(i, j));
        db_scale[std::size_t(j)] += std::fabs(to_double(dy_host(i, j)));
      }
  }
  void run(const space_tensor<float, matrix>& dw, const space_tensor<float, vector>& db, const cuda_executor& ex) const {
    matmul(dw, transpose(dy.view()), x, epilogue::bias_gradient_a(db), ex);
  }
  void expect(const space_tensor<float, matrix>& dw, const space_tensor<float, vector>& db) const {
    const double tol = 4 * matmul_tolerance<float, float>();
    expect_product(to_host(dw), dw_want, tol);
    const auto got = to_host(db);
    checker check;
    for (index_t j = 0; j < n; ++j) check(to_double(got(j)), db_want[std::size_t(j)], db_scale[std::size_t(j)], tol, "db", 0, 0, j);
    MATMUL_CHECK_ALL(check);
  }
};

// Runs body(t, ex) on two host threads at once (t = 0, 1), each with a stream
// of its own; a failure on either thread is reported once both have joined.
template <class Body>
void on_two_threads(const Body& body) {
  FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
  std::exception_ptr failure[2];
  const auto work = [&](int t) {
    try {
      created_stream s;
      const cuda_executor ex{s.stream};
      body(t, ex);
      ex.synchronize();
    } catch (...) {
      failure[t] = std::current_exception();
    }
  };
  std::thread first(work, 0), second(work, 1);
  first.join();
  second.join();
  for (int t = 0; t < 2; ++t) {
    INFO("thread ", t);
    if (failure[t]) CHECK_NOTHROW(std::rethrow_exception(failure[t]));
  }
}
}  // namespace

FUSOR_TEST_CASE("cuBLASLt workspaces: one per stream, kept, so that repeated matmuls allocate nothing") {
  const weight_gradient_case wg(2500, 20, 29, 111);
  space_tensor<float, matrix> dw1(20, 29), dw2(20, 29);
  space_tensor<float, vector> db1(20), db2(20);
  created_stream s1, s2, unused;
  const cuda_executor ex1{s1.stream}, ex2{s2.stream};
  // Summed apart, the bias gradient keeps its partial sums in the workspace: none is empty.
  const detail::scoped_separate_bias_gradient hook;
  const auto step = [&] {
    wg.run(dw1, db1, ex1);
    wg.run(dw2, db2, ex2);
    matmul(dw1, transpose(wg.dy.view()), wg.x, ex1);
    wg.run(dw1, db1, ex1);
  };
  int device = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  const std::size_t unused_bytes = detail::matmul_workspaces().bytes_of(device, unused.stream);
  FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
  step();  // plans and workspaces: once
  ex1.synchronize();
  ex2.synchronize();
  CHECK(detail::matmul_workspaces().bytes_of(device, s1.stream) > 0);
  CHECK(detail::matmul_workspaces().bytes_of(device, s2.stream) > 0);
  CHECK(detail::matmul_workspaces().bytes_of(device, unused.stream) == unused_bytes);
  const auto before = allocation_count();
  for (int i = 0; i < 3; ++i) step();
  ex1.synchronize();
  ex2.synchronize();
  CHECK(allocation_count() == before);
  wg.expect(dw1, db1);
  wg.expect(dw2, db2);
}

FUSOR_TEST_CASE("matmuls from two host threads on two streams at once: one plan, two workspaces, right results") {
  // The same shapes on both threads share one plan (its descriptor's pointers
  // are set per call); each stream has its own workspace.
  const weight_gradient_case cases[2] = {{700, 48, 40, 121}, {700, 48, 40, 131}};
  space_tensor<float, matrix> dw[2] = {space_tensor<float, matrix>(48, 40), space_tensor<float, matrix>(48, 40)};
  space_tensor<float, vector> db[2] = {space_tensor<float, vector>(48), space_tensor<float, vector>(48)};
  on_two_threads([&](int t, const cuda_executor& ex) {
    for (int i = 0; i < 50; ++i) cases[t].run(dw[t], db[t], ex);
  });
  for (int t = 0; t < 2; ++t) {
    INFO("thread ", t);
    cases[t].expect(dw[t], db[t]);
  }
}

FUSOR_TEST_CASE("plain matmuls from two host threads, two shapes in turn: shared plans without a lock, right results") {
  // A plan without bias or aux pointers is called without its lock, and each
  // thread remembers its last plan and workspace: alternating shapes on two
  // threads at once switches both memories on every call.
  const sizes shapes[2] = {{64, 48, 40}, {33, 24, 72}};
  const host_tensor<float, matrix> a_host[2] = {random_host<float>(matrix(64, 40), 161),
                                                random_host<float>(matrix(33, 72), 163)};
  const host_tensor<float, matrix> b_host[2] = {random_host<float>(matrix(40, 48), 162),
                                                random_host<float>(matrix(72, 24), 164)};
  std::vector<product> want;
  for (int s = 0; s < 2; ++s)
    want.push_back(reference_product(a_host[s], b_host[s], 1, shapes[s].m, shapes[s].n, shapes[s].k));
  const space_tensor<float, matrix> a[2] = {to_space(a_host[0]), to_space(a_host[1])};
  const space_tensor<float, matrix> b[2] = {to_space(b_host[0]), to_space(b_host[1])};
  space_tensor<float, matrix> c[2][2] = {
      {space_tensor<float, matrix>(64, 48), space_tensor<float, matrix>(33, 24)},
      {space_tensor<float, matrix>(64, 48), space_tensor<float, matrix>(33, 24)}};
  for (auto& per_thread : c)
    for (auto& t : per_thread) poison(t);
  on_two_threads([&](int t, const cuda_executor& ex) {
    for (int i = 0; i < 100; ++i) matmul(c[t][i % 2], a[i % 2], b[i % 2], ex);
  });
  for (int t = 0; t < 2; ++t)
    for (int s = 0; s < 2; ++s) {
      INFO("thread ", t, ", shape ", s);
      expect_product(to_host(c[t][s]), want[std::size_t(s)], matmul_tolerance<float, float>());
    }
}

FUSOR_TEST_CASE("a matmul captured into a CUDA graph replays right, fused and with the bias gradient summed apart") {
  const weight_gradient_case wg(300, 24, 40, 141);
  space_tensor<float, matrix> dw(24, 40);
  space_tensor<float, vector> db(24);
  for (bool separate : {false, true}) {
    INFO("summed apart ", separate);
    const detail::scoped_separate_bias_gradient hook(separate);
    created_stream s;
    const cuda_executor ex{s.stream};
    FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
    wg.run(dw, db, ex);  // the plan and the stream's workspace, outside the capture
    ex.synchronize();
    graph::captured_step step;
    step.capture(s.stream, [&] { wg.run(dw, db, ex); });
    for (int replay = 0; replay < 2; ++replay) {
      poison(dw), poison(db);
      step.replay();
      ex.synchronize();
      wg.expect(dw, db);
    }
    poison(dw), poison(db);  // and eagerly again, after the graph
    wg.run(dw, db, ex);
    ex.synchronize();
    wg.expect(dw, db);
  }
}
#endif
