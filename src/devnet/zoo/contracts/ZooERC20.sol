// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

/// A small, plain ERC-20 with an owner, the base of every token in the devnet zoo. Each zoo
/// token adds one behaviour by overriding `_update` or adding owner-only functions, so the
/// difference between two tokens is exactly the behaviour the risk report must notice.
/// Storage is initialised by `_init` (not a constructor) so the upgradeable implementation
/// behind the zoo's proxy can share it.
abstract contract ZooERC20 {
    string public name;
    string public symbol;
    uint256 public totalSupply;
    address public owner;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed holder, address indexed spender, uint256 value);
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);

    error NotOwner();
    error InsufficientBalance();
    error InsufficientAllowance();

    modifier onlyOwner() {
        if (msg.sender != owner) revert NotOwner();
        _;
    }

    function _init(string memory name_, string memory symbol_, uint256 supply, address holder) internal {
        name = name_;
        symbol = symbol_;
        owner = holder;
        emit OwnershipTransferred(address(0), holder);
        _mint(holder, supply);
    }

    function decimals() public pure returns (uint8) {
        return 18;
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _transfer(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        if (allowed != type(uint256).max) {
            if (allowed < value) revert InsufficientAllowance();
            allowance[from][msg.sender] = allowed - value;
        }
        _transfer(from, to, value);
        return true;
    }

    function transferOwnership(address newOwner) external onlyOwner {
        emit OwnershipTransferred(owner, newOwner);
        owner = newOwner;
    }

    function renounceOwnership() external onlyOwner {
        emit OwnershipTransferred(owner, address(0));
        owner = address(0);
    }

    /// Moves `value` from `from` to `to`; behaviours (fees, pauses, blocks) override this.
    function _transfer(address from, address to, uint256 value) internal virtual {
        _move(from, to, value);
    }

    function _move(address from, address to, uint256 value) internal {
        uint256 balance = balanceOf[from];
        if (balance < value) revert InsufficientBalance();
        unchecked {
            balanceOf[from] = balance - value;
        }
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }

    function _mint(address to, uint256 value) internal {
        totalSupply += value;
        balanceOf[to] += value;
        emit Transfer(address(0), to, value);
    }
}
