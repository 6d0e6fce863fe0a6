// The page: load the exported model (model/model.js), classify what is drawn on the canvas or a test image, and run
// the first 100 test images once at start (their logits stay in window.testLogits, for test/test_export.py).
import {load} from "./model/model.js";

const canvas = document.getElementById("draw"), pen = canvas.getContext("2d");
const status = document.getElementById("status");

// a 28x28 image (bytes 0-255, white on black) as the model's input: Float32Array of pixel values
const asInput = (pixels) => Float32Array.from(pixels);

async function classify(model, pixels) {
  const [logits, probs] = await model.run(asInput(pixels));
  return {logits, probs, label: probs.indexOf(Math.max(...probs))};
}

function show({probs, label}) {
  document.getElementById("prediction").textContent = label;
  document.getElementById("probs").replaceChildren(...Array.from(probs, (p, digit) => {
    const row = document.createElement("div");
    row.innerHTML = `<b>${digit}</b><span class="bar" style="width:${Math.round(p * 200)}px"></span>${p.toFixed(3)}`;
    return row;
  }));
}

// the canvas scaled down to 28x28, its red channel as the pixel values
function drawnPixels() {
  const small = document.createElement("canvas");
  small.width = small.height = 28;
  const ctx = small.getContext("2d");
  ctx.drawImage(canvas, 0, 0, 28, 28);
  return ctx.getImageData(0, 0, 28, 28).data.filter((_, i) => i % 4 === 0);
}

function paint(target, pixels, scale) {
  const image = new ImageData(28, 28);
  pixels.forEach((v, i) => image.data.set([v, v, v, 255], 4 * i));
  const small = document.createElement("canvas");
  small.width = small.height = 28;
  small.getContext("2d").putImageData(image, 0, 0);
  const ctx = target.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(small, 0, 0, 28 * scale, 28 * scale);
}

async function main() {
  const model = await load("model/");
  const images = new Uint8Array(await (await fetch("model/test_images.u8")).arrayBuffer());
  const labels = new Uint8Array(await (await fetch("model/test_labels.u8")).arrayBuffer());
  status.textContent = "running the test images...";
  const grid = document.getElementById("tests"), logits = [];
  let right = 0, start = performance.now();
  for (let i = 0; i < labels.length; i++) {
    const pixels = images.subarray(784 * i, 784 * (i + 1)), result = await classify(model, pixels);
    logits.push(Array.from(result.logits));
    right += result.label === labels[i];
    const figure = document.createElement("figure"), thumb = document.createElement("canvas");
    thumb.width = thumb.height = 56;
    paint(thumb, pixels, 2);
    figure.innerHTML = `<figcaption class="${result.label === labels[i] ? "right" : "wrong"}">${result.label}</figcaption>`;
    figure.prepend(thumb);
    figure.onclick = () => { paint(canvas, pixels, 10); show(result); };
    grid.append(figure);
  }
  window.testLogits = logits;
  window.msPerImage = (performance.now() - start) / labels.length;
  document.getElementById("summary").textContent =
    `${right} of ${labels.length} classified right, ${window.msPerImage.toFixed(1)} ms an image (one run at a time)`;
  status.textContent = `ready: ${model.device.adapterInfo?.architecture || "WebGPU"} adapter`;

  let drawing = false;
  canvas.onpointerdown = (e) => { drawing = true; pen.beginPath(); pen.moveTo(e.offsetX, e.offsetY); };
  canvas.onpointermove = (e) => {
    if (!drawing) return;
    Object.assign(pen, {strokeStyle: "white", lineWidth: 22, lineCap: "round", lineJoin: "round"});
    pen.lineTo(e.offsetX, e.offsetY);
    pen.stroke();
  };
  canvas.onpointerup = async () => { drawing = false; show(await classify(model, drawnPixels())); };
  document.getElementById("clear").onclick = () => {
    pen.clearRect(0, 0, 280, 280);
    document.getElementById("prediction").textContent = "-";
    document.getElementById("probs").replaceChildren();
  };
}

main().then(() => { document.title += ": ready"; },
            (e) => { status.textContent = `error: ${e.message}`; document.title += ": error"; throw e; });
