from hardware_model_integration import get_hardware_aware_model_classification
import jinja2
import os

# Get hardware-aware classification for the model
classification = get_hardware_aware_model_classification("bert-base-uncased")

# Load Jinja2 template
template_env = jinja2.Environment(loader=jinja2.FileSystemLoader("./templates"))
template = template_env.get_template(classification["recommended_template"])

# Generate test file with hardware awareness
test_content = template.render(
    model_name=classification["model_name"],
    model_family=classification["family"],
    model_subfamily=classification.get("subfamily"),
    recommended_hardware=classification["recommended_hardware"],
    resource_requirements=classification["resource_requirements"],
    torch_device=classification.get("torch_device", "cuda:0" if classification["recommended_hardware"] == "cuda" else "cpu")
)

# Save the test file
output_dir = "./generated_tests"
os.makedirs(output_dir, exist_ok=True)
test_filename = f"test_hf_{classification['model_name'].replace('/', '_').replace('-', '_')}.py"
with open(os.path.join(output_dir, test_filename), "w") as f:
    f.write(test_content)

print(f"Generated hardware-aware test file: {test_filename}")
