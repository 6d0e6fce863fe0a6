const ARRAYS = {F32: Float32Array, F16: Uint16Array, BF16: Uint16Array, I32: Int32Array, U32: Uint32Array,
  I16: Int16Array, U16: Uint16Array, I8: Int8Array, U8: Uint8Array, BOOL: Uint8Array, I64: BigInt64Array,
  U64: BigUint64Array};
const STORAGE = () => GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;

// bytes padded to whole 4-byte words (what WebGPU writes)
function words(bytes) { const out = new Uint8Array((bytes.byteLength + 3) & ~3); out.set(bytes); return out; }
async function get(url, kind) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response[kind]();
}

// The model, ready to run: buffers made, weights written, pipelines compiled. baseUrl: where model.js's files are.
export async function load(baseUrl = new URL(".", import.meta.url)) {
  const base = new URL(String(baseUrl).replace(/\/?$/, "/"), document.baseURI);
  const adapter = navigator.gpu && await navigator.gpu.requestAdapter();
  if (!adapter) throw new Error("this browser offers no WebGPU adapter");
  const device = await adapter.requestDevice();
  const buffers = MODEL.buffers.map((size) => device.createBuffer({size, usage: STORAGE()}));
  const file = await get(new URL("model.safetensors", base), "arrayBuffer");
  const headerLength = Number(new DataView(file).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(file, 8, headerLength)));
  for (const [name, i] of Object.entries(MODEL.weights)) {
    const [begin, end] = header[name].data_offsets;
    device.queue.writeBuffer(buffers[i], 0, words(new Uint8Array(file, 8 + headerLength + begin, end - begin)));
  }
  const modules = {};
  for (const {file} of MODEL.kernels.filter((k) => k.file)) {
    modules[file] ??= device.createShaderModule({code: await get(new URL(file, base), "text")});
  }
  const kernels = await Promise.all(MODEL.kernels.map(async (k) => {
    if (k.copy) return {copy: k.copy};
    const layout = device.createBindGroupLayout({entries: k.bindings.map((_, binding) =>
      ({binding, visibility: GPUShaderStage.COMPUTE, buffer: {type: "storage"}}))});
    const pipeline = await device.createComputePipelineAsync({compute: {module: modules[k.file], entryPoint: k.name},
      layout: device.createPipelineLayout({bindGroupLayouts: [layout]})});
    const bindGroup = device.createBindGroup({layout, entries: k.bindings.map(([buf, offset, size], binding) =>
      ({binding, resource: {buffer: buffers[buf], offset, size}}))});
    return {pipeline, bindGroup, dispatch: k.dispatch};
  }));
  return {
    device, inputs: MODEL.inputs, outputs: MODEL.outputs,
    // typed arrays in, typed arrays out (one per output), through every kernel in order
    async run(...inputs) {
      if (inputs.length !== MODEL.inputs.length) {
        throw new Error(`run takes ${MODEL.inputs.length} inputs, not ${inputs.length}`);
      }
      MODEL.inputs.forEach((spec, i) => {
        const x = inputs[i], want = ARRAYS[spec.dtype], n = spec.shape.reduce((a, b) => a * b, 1);
        if (!(x instanceof want) || x.length !== n) {
          throw new Error(`input ${i}: expected a ${want.name} of ${n} elements (shape [${spec.shape}])`);
        }
        device.queue.writeBuffer(buffers[spec.buffer], spec.offset,
                                 words(new Uint8Array(x.buffer, x.byteOffset, x.byteLength)));
      });
      const encoder = device.createCommandEncoder();
      let pass = null;
      for (const k of kernels) {
        if (k.copy) {  // copies go between compute passes
          pass?.end();
          pass = null;
          const [[to, toOffset, size], [from, fromOffset]] = k.copy;
          encoder.copyBufferToBuffer(buffers[from], fromOffset, buffers[to], toOffset, size);
          continue;
        }
        pass ??= encoder.beginComputePass();
        pass.setPipeline(k.pipeline);
        pass.setBindGroup(0, k.bindGroup);
        pass.dispatchWorkgroups(...k.dispatch);
      }
      pass?.end();
      const reads = MODEL.outputs.map((o) => {
        const size = (o.nbytes + 3) & ~3;
        const staging = device.createBuffer({size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
        encoder.copyBufferToBuffer(buffers[o.buffer], o.offset, staging, 0, size);
        return staging;
      });
      device.queue.submit([encoder.finish()]);
      return Promise.all(MODEL.outputs.map(async (o, i) => {
        await reads[i].mapAsync(GPUMapMode.READ);
        const bytes = reads[i].getMappedRange().slice(0, o.nbytes);
        reads[i].destroy();
        return new ARRAYS[o.dtype](bytes);
      }));
    },
  };
}
