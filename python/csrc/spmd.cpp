// axle._C._spmd: the bindings torch_xla's SPMD API (torch_xla.distributed.spmd, the SPMD part
// of torch_xla.runtime, torch_xla._XLAC's sharding calls, the loader's input_sharding and the
// distributed checkpoint) needs, over axle's C++ SPMD (include/axle/xs.h). Nothing is
// partitioned here: annotations go on the axle lazy tensor an xla tensor holds, and axle's
// partitioner does the rest at the step boundary.
//
// Meshes travel as (device_ids, mesh_shape, axis_names) and are rebuilt as xs::Mesh per call
// (its checks run each time; torch_xla.distributed.spmd.Mesh checks once, at construction, by
// calling _check_mesh). Partition specs travel as Python sequences whose entries are None, a
// mesh axis name (str), a mesh axis index (int) or a tuple of names and indices.
#include <torch/extension.h>

#include <string>
#include <vector>

#include "axle/data/device_loader.h"
#include "axle/distributed_checkpoint.h"
#include "axle/runtime.h"
#include "axle/xs.h"
#include "bridge.h"
#include "spmd/device_count.h"
#include "spmd/sharding.h"

namespace py = pybind11;

namespace axle_py {
namespace {

namespace xs = axle::xs;

xs::Mesh make_mesh(const std::vector<int64_t>& ids, const std::vector<int64_t>& shape,
                   const std::optional<std::vector<std::string>>& names) {
  return xs::Mesh(ids, shape, names.value_or(std::vector<std::string>{}));
}

std::string type_name(const py::handle& h) { return py::str(py::type::handle_of(h).attr("__name__")); }

// One mesh axis of a tuple entry: a name or an index.
xs::Dim axis_of(const py::handle& h, size_t d) {
  if (py::isinstance<py::str>(h)) return xs::Dim(h.cast<std::string>());
  if (py::isinstance<py::int_>(h) && !py::isinstance<py::bool_>(h)) {
    const int64_t i = h.cast<int64_t>();
    if (i < 0 || i > INT32_MAX)
      throw py::value_error("[mark_sharding] partition spec entry " + std::to_string(d) + " names mesh axis index " +
                            std::to_string(i) + ": expected a non-negative mesh axis index");
    return xs::Dim(int(i));
  }
  throw py::type_error("[mark_sharding] partition spec entry " + std::to_string(d) + " holds a " + type_name(h) +
                       " (" + std::string(py::repr(h)) +
                       "): expected a mesh axis name (str), a mesh axis index (int), a tuple of those, or None");
}

/// A Python partition spec as xs::PartitionSpec (type errors here; meaning errors in axle).
xs::PartitionSpec to_spec(const py::handle& spec) {
  if (py::isinstance<py::str>(spec) || !py::isinstance<py::sequence>(spec))
    throw py::type_error("[mark_sharding] partition_spec must be a tuple with one entry per tensor dim (None, a "
                         "mesh axis name or index, or a tuple of them), got " + std::string(py::repr(spec)));
  xs::PartitionSpec out;
  size_t d = 0;
  for (const py::handle& e : spec.cast<py::sequence>()) {
    if (e.is_none()) {
      out.push_back(xs::None);
    } else if (py::isinstance<py::tuple>(e) || py::isinstance<py::list>(e)) {
      std::vector<xs::Dim> axes;
      for (const py::handle& a : e.cast<py::sequence>()) {
        if (py::isinstance<py::tuple>(a) || py::isinstance<py::list>(a))
          throw py::value_error("[mark_sharding] partition spec entry " + std::to_string(d) + " " +
                                std::string(py::repr(e)) + " nests a tuple: tuples of mesh axes do not nest");
        if (a.is_none())
          throw py::value_error("[mark_sharding] partition spec entry " + std::to_string(d) + " " +
                                std::string(py::repr(e)) + " holds None: a tuple holds mesh axes only");
        axes.push_back(axis_of(a, d));
      }
      out.push_back(xs::Dim::axes(std::move(axes)));
    } else {
      out.push_back(axis_of(e, d));
    }
    ++d;
  }
  return out;
}

// A mesh argument: (device_ids, mesh_shape, axis_names or None).
using MeshArgs = std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::optional<std::vector<std::string>>>;
xs::Mesh mesh_of(const MeshArgs& m) { return make_mesh(std::get<0>(m), std::get<1>(m), std::get<2>(m)); }

axle::Tensor& value_of(const at::Tensor& t, const char* op) { return impl_of(t, op)->value; }

/// The axle value of a cpu at::Tensor (a host copy) or an xla tensor (its value).
axle::Tensor any_to_axle(const at::Tensor& t, const char* op) {
  if (is_xla(t)) return value_of(t, op);
  TORCH_CHECK(t.device().is_cpu(), "[", op, "] expected a cpu or xla tensor, got one on ", t.device());
  at::Tensor c = t.contiguous();
  axle::DType dt = to_axle_dtype(c.scalar_type(), op);
  return axle::from_blob(c.data_ptr(), axle::Shape(c.sizes().begin(), c.sizes().end()), dt, {.dtype = dt});
}

py::object shard_tuple(const xs::XLAShard& s) {
  py::object indices = py::none();
  if (s.indices) {
    py::list l;
    for (const xs::Slice& r : *s.indices) l.append(py::make_tuple(r.start, r.stop));
    indices = l;
  }
  return py::make_tuple(axle_to_cpu(s.data), indices, s.shard_device, s.replica_id);
}

/// Axle state-dict entries for `names`/`tensors`; cpu tensors become host copies (`cpu_index`
/// lists where, so a load can copy the result back).
axle::nn::StateDict to_state_dict(const std::vector<std::string>& names, const std::vector<at::Tensor>& tensors,
                                  const char* op) {
  TORCH_CHECK(names.size() == tensors.size(), "[", op, "] internal: ", names.size(), " names for ", tensors.size(),
              " tensors");
  axle::nn::StateDict sd;
  for (size_t i = 0; i < names.size(); ++i) sd.emplace_back(names[i], any_to_axle(tensors[i], op));
  return sd;
}

void copy_back_cpu(const std::vector<at::Tensor>& tensors, const axle::nn::StateDict& sd) {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!is_xla(tensors[i])) const_cast<at::Tensor&>(tensors[i]).copy_(axle_to_cpu(sd[i].second));
}

}  // namespace

void init_spmd(py::module_& parent) {
  py::module_ m = parent.def_submodule("_spmd", "axle's SPMD (axle/xs.h) for torch_xla.distributed.spmd");

  // ---- runtime ----
  m.def("use_spmd", [](bool auto_sharding) { axle::runtime::use_spmd(auto_sharding); },
        py::arg("auto_sharding") = false);
  m.def("is_spmd", [] { return axle::runtime::is_spmd(); });
  m.def("global_runtime_device_count", [] { return axle::runtime::global_runtime_device_count(); });
  m.def("addressable_runtime_device_count", [] { return axle::runtime::addressable_runtime_device_count(); });
  m.def("device_count_source", [] { return axle::spmd::device_count_source(); },
        "where the device count came from: 'AXLE_CPU_DEVICES=4', or the default");

  // ---- meshes ----
  m.def("check_mesh", [](const std::vector<int64_t>& ids, const std::vector<int64_t>& shape,
                         const std::optional<std::vector<std::string>>& names) { make_mesh(ids, shape, names); },
        "raises axle's error for an invalid mesh");
  m.def("mesh_str", [](const MeshArgs& mesh) { return mesh_of(mesh).str(); });
  m.def("set_global_mesh", [](const std::optional<MeshArgs>& mesh) {
    xs::set_global_mesh(mesh ? std::optional<xs::Mesh>(mesh_of(*mesh)) : std::nullopt);
  });

  // ---- annotations ----
  m.def("mark_sharding", [](const at::Tensor& t, const MeshArgs& mesh, const py::object& spec) {
    const xs::PartitionSpec p = to_spec(spec);
    AxleTensorImpl* impl = impl_of(t, "mark_sharding");
    // xs::mark_sharding changes the lazy state shared by every handle of this value (data is
    // split at once; a pending value gets a constraint in its graph); the impl keeps the handle.
    axle::Tensor v = impl->value;
    xs::mark_sharding(v, mesh_of(mesh), p);
    impl->set_value(v);
  });
  m.def("check_spec", [](int64_t rank, const MeshArgs& mesh, const py::object& spec) {
    // The checks mark_sharding makes on the spec, without a tensor (ShardingSpec's).
    return axle::spmd::Sharding::from_spec(mesh_of(mesh), to_spec(spec), rank, "ShardingSpec").to_hlo_v1();
  }, "the sharding string a tensor of rank `rank` gets from `spec` on `mesh` (axle's errors otherwise)");
  m.def("sharding_constraint", [](const at::Tensor& t, const MeshArgs& mesh, const py::object& spec) {
    // A new tensor: t with a sharding constraint (mark_sharding_with_gradients' forward and backward).
    return wrap(xs::mark_sharding_with_gradients(value_of(t, "mark_sharding_with_gradients"), mesh_of(mesh),
                                                  to_spec(spec)));
  });
  m.def("clear_sharding", [](const at::Tensor& t) {
    AxleTensorImpl* impl = impl_of(t, "clear_sharding");
    axle::Tensor v = impl->value;
    xs::clear_sharding(v);
    impl->set_value(v);
  });
  m.def("sharding_spec", [](const at::Tensor& t) {
    return is_xla(t) ? xs::get_sharding_spec(value_of(t, "_get_xla_sharding_spec")) : std::string();
  });
  m.def("sharding_type", [](const at::Tensor& t) -> std::optional<int> {
    if (!is_xla(t)) return std::nullopt;
    auto k = xs::get_sharding_type(value_of(t, "_get_xla_sharding_type"));
    return k ? std::optional<int>(int(*k)) : std::nullopt;
  });
  m.def("inferred_sharding", [](const at::Tensor& t) { return xs::inferred_sharding(value_of(t, "inferred_sharding")); });
  m.def("debug_info", [](const at::Tensor& t) { return xs::debug_info(value_of(t, "_get_xla_tensor_debug_info")); });
  m.def("explain", [](const std::vector<at::Tensor>& ts) {
    std::vector<axle::Tensor> v;
    for (const at::Tensor& t : ts) v.push_back(value_of(t, "explain"));
    return xs::explain(v);
  });
  m.def("visualize_tensor_sharding", [](const at::Tensor& t, bool use_color, int min_width, int max_width) {
    return xs::debugging::visualize_tensor_sharding(value_of(t, "visualize_tensor_sharding"),
                                                    {.use_color = use_color, .min_width = min_width, .max_width = max_width});
  });
  m.def("visualize_sharding", [](const std::string& s, bool use_color, int min_width, int max_width) {
    return xs::debugging::visualize_sharding(s, {.use_color = use_color, .min_width = min_width, .max_width = max_width});
  });

  // ---- manual regions ----
  m.def("enable_manual_sharding", [](const at::Tensor& t, const py::object& spec, const MeshArgs& mesh) {
    const xs::Mesh msh = mesh_of(mesh);
    return wrap(xs::enable_manual_sharding(value_of(t, "enable_manual_sharding"), to_spec(spec), &msh));
  });
  m.def("disable_manual_sharding", [](const at::Tensor& t, const py::object& spec, const std::vector<int64_t>& full_shape,
                                      const MeshArgs& mesh) {
    const xs::Mesh msh = mesh_of(mesh);
    return wrap(xs::disable_manual_sharding(value_of(t, "disable_manual_sharding"), to_spec(spec), full_shape, &msh));
  });

  // ---- shards ----
  m.def("local_shards", [](const at::Tensor& t) {
    py::list out;
    for (const xs::XLAShard& s : xs::local_shards(value_of(t, "local_shards"))) out.append(shard_tuple(s));
    return out;
  }, "[(cpu data (padded), [(start, stop)] per dim or None when replicated, 'CPU:d', replica_id)]");
  m.def("load_local_shards_", [](const at::Tensor& t, const std::vector<at::Tensor>& datas) {
    std::vector<xs::XLAShard> shards;
    for (const at::Tensor& d : datas) shards.push_back({.data = any_to_axle(d.cpu(), "load_local_shards_")});
    AxleTensorImpl* impl = impl_of(t, "load_local_shards_");
    axle::Tensor v = impl->value;
    xs::load_local_shards_(v, shards);
    impl->set_value(v);
  });

  // ---- the loader's input_sharding (xm.send_cpu_data_to_device) ----
  m.def("send_cpu_data_to_device", [](const std::vector<at::Tensor>& tensors, const std::optional<MeshArgs>& mesh,
                                      const py::object& spec, bool minibatch) {
    std::vector<axle::Tensor> host;
    for (const at::Tensor& t : tensors) {
      TORCH_CHECK(t.device().is_cpu(), "[send_cpu_data_to_device] expected cpu tensors, got one on ", t.device());
      host.push_back(any_to_axle(t, "send_cpu_data_to_device"));
    }
    std::optional<xs::ShardingSpec> s;
    if (mesh) s.emplace(mesh_of(*mesh), to_spec(spec), minibatch);
    std::vector<axle::Tensor> out;
    {
      py::gil_scoped_release nogil;
      out = axle::xm::send_cpu_data_to_device(host, axle::device(), s ? &*s : nullptr);
    }
    return wrap(out);
  }, py::arg("tensors"), py::arg("mesh"), py::arg("spec"), py::arg("minibatch") = false);

  // ---- distributed checkpoints ----
  namespace dc = axle::experimental::distributed_checkpoint;
  m.def("dc_save", [](const std::vector<std::string>& names, const std::vector<at::Tensor>& tensors,
                      const std::string& dir) { dc::save(to_state_dict(names, tensors, "save"), dir); });
  m.def("dc_load", [](const std::vector<std::string>& names, const std::vector<at::Tensor>& tensors,
                      const std::string& dir) {
    auto sd = to_state_dict(names, tensors, "load");
    dc::load(sd, dir);
    copy_back_cpu(tensors, sd);
  });
  py::class_<dc::CheckpointManager>(m, "CheckpointManager")
      .def(py::init<std::string, int64_t, int64_t>(), py::arg("path"), py::arg("save_interval"),
           py::arg("max_to_keep") = 0)
      .def("save", [](dc::CheckpointManager& c, int64_t step, const std::vector<std::string>& names,
                      const std::vector<at::Tensor>& tensors, bool force) {
        return c.save(step, to_state_dict(names, tensors, "CheckpointManager.save"), force);
      })
      .def("save_async", [](dc::CheckpointManager& c, int64_t step, const std::vector<std::string>& names,
                            const std::vector<at::Tensor>& tensors, bool force) {
        return c.save_async(step, to_state_dict(names, tensors, "CheckpointManager.save_async"), force);
      })
      .def("join", [](dc::CheckpointManager& c) {
        py::gil_scoped_release nogil;
        c.join();
      })
      .def("all_steps", &dc::CheckpointManager::all_steps)
      .def("restore", [](dc::CheckpointManager& c, int64_t step, const std::vector<std::string>& names,
                         const std::vector<at::Tensor>& tensors) {
        auto sd = to_state_dict(names, tensors, "CheckpointManager.restore");
        c.restore(step, sd);
        copy_back_cpu(tensors, sd);
      });
}

}  // namespace axle_py
